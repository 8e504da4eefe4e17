//! One complete keyflight deployment per test, as the client sees it.
//!
//! The launcher ([`keyflight_testkit::stack`]) starts Postgres, the lease-store, the demo
//! upstream and Envoy on free ports and stops them when the stack drops; this wrapper adds
//! what a scenario does through them: requests ([`Stack::post`]), the upstream's execution
//! count and gates, lease-store and Envoy counters, the operator CLI, and the faults a
//! scenario injects (`faults.rs`), by replica number.
//!
//! With [`StackOptions::two_replicas`] the stack is the two-replica set-up: two Envoys in
//! front of the same upstream and two lease-stores on the same Postgres, every Envoy
//! reaching both lease-stores. Requests pick an Envoy with [`Stack::post_via`]; replica 0
//! is what [`Stack::post`] and the other single-replica helpers use. Which lease-store
//! serves a given call is Envoy's choice, so store counters of a two-replica stack are read
//! summed ([`Stack::store_event_total`]).
//!
//! This file holds the stack and what a test observes through it; `post.rs` the requests,
//! `faults.rs` the faults a test injects.

mod faults;
mod post;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use keyflight_testkit::envoy_config::Ports;
use keyflight_testkit::stack::{ADMIN_TOKEN, Stack as TestkitStack};
use serde_json::Value;

use keyflight_testkit::metrics::{self, StoreMetrics};

pub use keyflight_testkit::stack::{
    EnvoyStart, SHARED_AUTHORITY, StackOptions, envoy_alone as start_envoy_alone, envoy_alone_as,
};
pub use post::Post;

/// How long one request through Envoy may take (above any follower wait a test configures).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Stack::eventually`] waits: below [`REQUEST_TIMEOUT`], so a condition that
/// never comes true fails with its own message rather than as a request timeout.
const EVENTUALLY_TIMEOUT: Duration = Duration::from_secs(15);

/// The principal requests carry unless a test says otherwise (header `x-user`, demo policy).
pub const DEFAULT_USER: &str = "alice";

/// A running test deployment: the launcher's [`keyflight_testkit::stack::Stack`] and an
/// HTTP client for the requests a scenario sends and the counters it reads.
pub struct Stack {
    inner: TestkitStack,
    client: reqwest::Client,
}

impl Stack {
    /// Starts a stack and waits until every part is ready; panics (with logs) otherwise.
    pub async fn start(options: StackOptions) -> Stack {
        Stack {
            inner: TestkitStack::start(options).await,
            client: http_client(),
        }
    }

    /// The launcher's stack, for what this wrapper does not forward.
    pub fn parts(&self) -> &TestkitStack {
        &self.inner
    }

    /// The launcher's stack, mutably (faults that restart parts).
    pub fn parts_mut(&mut self) -> &mut TestkitStack {
        &mut self.inner
    }

    /// Starts a request through Envoy: `POST path` as [`DEFAULT_USER`], JSON content type.
    pub fn post(&self, path: &str) -> Post<'_> {
        self.post_via(0, path)
    }

    /// [`Stack::post`] through Envoy replica `replica` (0 or, in a two-replica stack, 1).
    ///
    /// In a two-replica stack every request carries `host: `[`SHARED_AUTHORITY`], as
    /// behind a load balancer: the authority is part of the scope (K3), and the replicas'
    /// own `127.0.0.1:PORT` authorities would make every request a different operation.
    pub fn post_via(&self, replica: usize, path: &str) -> Post<'_> {
        let post = Post {
            stack: self,
            host: self.inner.envoy_ip(replica),
            listener: self.ports_of(replica).listener,
            path: path.to_owned(),
            headers: vec![
                ("x-user".into(), DEFAULT_USER.into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: Vec::new(),
            timeout: None,
        };
        if self.inner.replicas() > 1 {
            post.header("host", SHARED_AUTHORITY)
        } else {
            post
        }
    }

    /// The port of Envoy replica `replica`'s listener, for raw requests ([`crate::raw_http`]).
    pub fn listener_port(&self, replica: usize) -> u16 {
        self.ports_of(replica).listener
    }

    /// `http://127.0.0.1:PORT{path}` on Envoy replica 0's listener (its own address in a
    /// stack with its own networks), for clients other than [`Stack::post`] (the
    /// `keyflight` client command).
    pub fn url(&self, path: &str) -> String {
        format!(
            "http://{}:{}{path}",
            self.inner.envoy_ip(0),
            self.ports_of(0).listener
        )
    }

    /// `https://127.0.0.1:PORT{path}` on Envoy replica `replica`'s listener, for clients
    /// other than [`Stack::post`] (the mTLS scenario's `curl`).
    pub fn https_url(&self, replica: usize, path: &str) -> String {
        format!(
            "https://127.0.0.1:{}{path}",
            self.ports_of(replica).listener
        )
    }

    /// Payment handlers the upstream has entered since it started.
    pub async fn upstream_executions(&self) -> u64 {
        self.upstream_stats().await["executions"]
            .as_u64()
            .unwrap_or_else(|| panic!("upstream /stats has no `executions`"))
    }

    /// The payments the upstream committed (`GET /effects`), on a stack started with
    /// [`StackOptions::upstream_effects`].
    pub async fn upstream_payments(&self) -> u64 {
        let url = format!("http://{}/effects", self.inner.upstream_address());
        self.get_json(&url).await["payments"]
            .as_u64()
            .unwrap_or_else(|| panic!("{url} has no `payments`"))
    }

    /// The upstream's execution log (`GET /executions`), oldest first.
    pub async fn upstream_execution_log(&self) -> Vec<Value> {
        let url = format!("http://{}/executions", self.inner.upstream_address());
        let text = self
            .client
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
            .collect()
    }

    /// The upstream's `/stats`: `{"executions": N, "by_path": {...}}`.
    pub async fn upstream_stats(&self) -> Value {
        self.get_json(&format!("http://{}/stats", self.inner.upstream_address()))
            .await
    }

    /// How many handlers wait at the upstream's gate `name`.
    pub async fn gate_waiting(&self, name: &str) -> u64 {
        let url = format!("http://{}/gates/{name}", self.inner.upstream_address());
        self.get_json(&url).await["waiting"]
            .as_u64()
            .unwrap_or_else(|| panic!("upstream gate status has no `waiting`"))
    }

    /// Opens the upstream's gate `name` for good.
    pub async fn open_gate(&self, name: &str) {
        let url = format!("http://{}/gates/{name}/open", self.inner.upstream_address());
        let response = self
            .client
            .post(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        assert!(
            response.status().is_success(),
            "POST {url}: {}",
            response.status()
        );
    }

    /// Waits until `n` handlers are parked at gate `name`.
    pub async fn wait_for_gate(&self, name: &str, n: u64) {
        self.eventually(
            &format!("{n} handler(s) waiting at gate `{name}`"),
            || async { self.gate_waiting(name).await >= n },
        )
        .await;
    }

    /// One scrape of the lease-store's `/metrics`.
    pub async fn store_metrics(&self) -> StoreMetrics {
        self.store_metrics_at(0).await
    }

    /// One scrape of lease-store replica `replica`'s `/metrics`.
    pub async fn store_metrics_at(&self, replica: usize) -> StoreMetrics {
        let url = format!(
            "http://{}:{}/metrics",
            self.inner.store_ip(replica),
            self.lease_store_port(replica)
        );
        StoreMetrics::parse(&self.get_text(&url).await)
    }

    /// Lease-store event `name` summed over every lease-store replica: in a two-replica
    /// stack either replica may have served a given call.
    pub async fn store_event_total(&self, name: &str) -> u64 {
        let mut total = 0;
        for replica in 0..self.inner.store_replicas() {
            total += self.store_metrics_at(replica).await.event(name);
        }
        total
    }

    /// Waits until the lease-store has counted event `name` at least `n` times.
    pub async fn wait_for_store_event(&self, name: &str, n: u64) {
        self.eventually(&format!("lease-store event `{name}` >= {n}"), || async {
            self.store_metrics().await.event(name) >= n
        })
        .await;
    }

    /// Everything Envoy replica 0 logged so far.
    pub fn envoy_log(&self) -> String {
        self.inner.envoy_log(0)
    }

    /// Runs `lease-store records ARGS` (the operator CLI) against lease-store replica 0
    /// with the admin token; returns stdout, panicking with stderr when it fails.
    pub async fn records_cli(&self, args: &[&str]) -> String {
        let output = tokio::process::Command::new(&self.inner.binaries().lease_store)
            .arg("records")
            .args(args)
            .env(
                "KEYFLIGHT_ADMIN_URL",
                format!(
                    "http://{}:{}",
                    self.inner.store_ip(0),
                    self.inner.store_admin_port(0)
                ),
            )
            .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .await
            .unwrap_or_else(|e| panic!("run lease-store records: {e}"));
        assert!(
            output.status.success(),
            "lease-store records {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The records the stack holds, newest first, as `lease-store records list --json`
    /// prints them.
    pub async fn records(&self) -> Vec<Value> {
        let listed: Value = serde_json::from_str(&self.records_cli(&["--json", "list"]).await)
            .expect("records list --json prints JSON");
        listed["records"]
            .as_array()
            .unwrap_or_else(|| panic!("a record list: {listed}"))
            .clone()
    }

    /// The states of the records the stack holds, newest first.
    pub async fn record_states(&self) -> Vec<String> {
        self.records()
            .await
            .iter()
            .map(|record| record["state"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Runs `sql` with `psql` (see [`PgCluster::psql`]) where the stack's records are: its
    /// database, or each partition of a partitioned one in turn (what each printed, in order).
    pub fn sql(&self, sql: &str) -> String {
        self.inner
            .database()
            .record_nodes()
            .iter()
            .map(|node| node.psql(sql))
            .collect()
    }

    /// Claims a fresh, random scope directly at lease-store replica 0 (no upstream runs)
    /// and returns the HTTP status: a probe of whether the journal takes claims right now.
    pub async fn probe_store_claim(&self) -> u16 {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let scope = keyflight_protocol::Digest::of(
            format!(
                "probe/{}/{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            )
            .as_bytes(),
        );
        let url = format!(
            "http://{}:{}/v1/claims/{}",
            self.inner.store_ip(0),
            self.inner.store_port(0),
            scope.to_hex()
        );
        let body = serde_json::json!({
            "fingerprint": keyflight_protocol::Digest::of(b"probe").to_hex(),
            "lease_ms": 1000,
        });
        match self
            .client
            .post(&url)
            .bearer_auth(self.inner.options().filter_token())
            .json(&body)
            .send()
            .await
        {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        }
    }

    /// The filter's Envoy counter `keyflight.NAME` (F13), e.g. `outcome.replay` or
    /// `event.claimed`, summed over Envoy's workers; `0` when it was never incremented.
    pub async fn filter_counter(&self, name: &str) -> u64 {
        self.filter_counter_at(0, name).await
    }

    /// [`Stack::filter_counter`] of Envoy replica `replica`.
    pub async fn filter_counter_at(&self, replica: usize, name: &str) -> u64 {
        // The one place that knows each adapter's namespace: keyflight_testkit::metrics.
        let url = format!(
            "http://{}:{}{}",
            self.inner.envoy_ip(replica),
            self.ports_of(replica).admin,
            metrics::filter_stat_path(name)
        );
        let text = self.get_text(&url).await;
        metrics::filter_stat_value(&text, name).map_or(0, |value| {
            value
                .parse()
                .unwrap_or_else(|e| panic!("{name}: `{value}` is not a count ({e})"))
        })
    }

    /// Envoy's own counter `stat` (e.g. `cluster.demo_upstream.upstream_rq_retry`) on
    /// replica 0; `0` when it was never incremented.
    pub async fn envoy_stat(&self, stat: &str) -> u64 {
        self.envoy_stat_at(0, stat).await
    }

    /// [`Stack::envoy_stat`] of Envoy replica `replica`.
    pub async fn envoy_stat_at(&self, replica: usize, stat: &str) -> u64 {
        let url = format!(
            "http://{}:{}/stats?filter=^{stat}$",
            self.inner.envoy_ip(replica),
            self.ports_of(replica).admin
        );
        let text = self.get_text(&url).await;
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{stat}: ")))
            .map_or(0, |value| {
                value
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{stat}: `{value}` is not a count ({e})"))
            })
    }

    /// Polls `condition` until it holds; panics naming `what` after [`EVENTUALLY_TIMEOUT`].
    pub async fn eventually<F, Fut>(&self, what: &str, condition: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        keyflight_testkit::process::eventually(what, EVENTUALLY_TIMEOUT, condition).await;
    }

    fn ports_of(&self, replica: usize) -> &Ports {
        self.inner.envoy_ports(replica)
    }

    fn lease_store_port(&self, replica: usize) -> u16 {
        self.inner.store_port(replica)
    }

    async fn get_text(&self, url: &str) -> String {
        self.client
            .get(url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("read {url}: {e}"))
    }

    async fn get_json(&self, url: &str) -> Value {
        self.client
            .get(url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
    }
}

pub(super) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        // A 3xx is an answer to assert on (F6), not a hop to follow.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_else(|e| panic!("build an HTTP client: {e}"))
}
