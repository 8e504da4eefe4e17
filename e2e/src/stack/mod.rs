//! One complete keyflight deployment per test: Postgres, lease-store, demo upstream, Envoy.
//!
//! [`Stack::start`] brings the four up on free ports and returns once each answers its
//! readiness probe; dropping the stack stops them all (Envoy first). Child logs and the
//! rendered Envoy config are kept in the temp dir when the test fails (their paths are
//! printed) and removed when it passes.
//!
//! With [`StackOptions::two_replicas`] the stack is the two-replica set-up: two Envoys in
//! front of the same upstream and two lease-stores on the same Postgres, every Envoy
//! reaching both lease-stores (both render the shipped `envoy/two-replicas.yaml`). Requests
//! pick an Envoy with [`Stack::post_via`]; replica 0 is what [`Stack::post`] and the other
//! single-replica helpers use. Which lease-store serves a given call is Envoy's choice, so
//! store counters of a two-replica stack are read summed ([`Stack::store_event_total`]).
//!
//! The commands that run each part ([`envoy_command`], [`lease_store_command`],
//! [`upstream_command`]) are public, so other harnesses (`keyflight-chaos`) run the parts
//! exactly as the tests do.
//!
//! With [`StackOptions::replicated_postgres`] the database is a replicated Postgres that
//! really fails over (etcd + two Patroni nodes, `keyflight_testkit::ha`), and the
//! lease-store gets its multi-host URL; [`Stack::ha`] injects the faults.
//!
//! Envoy runs with `--disable-hot-restart`: hot restart is what needs a shared-memory
//! region per `--base-id`, so without it any number of test Envoys coexist with no id to
//! hand out.
//!
//! This file holds the stack and what a test observes through it; `options.rs` what it runs,
//! `post.rs` the requests, `faults.rs` the faults a test injects, `commands.rs` how each part
//! is started.

mod commands;
mod faults;
mod options;
mod post;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use keyflight_testkit::database::Database;
use keyflight_testkit::ha::{HaCluster, HaOptions};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::{ChildGuard, free_port, wait_http_ok};
use serde_json::Value;

use crate::binaries::Binaries;
use crate::envoy_config::Ports;
use crate::metrics::StoreMetrics;

pub use commands::{
    EnvoyStart, envoy_command, lease_store_command, start_envoy_alone, upstream_command,
};
use commands::{lds_path_of, spawn_envoy, spawn_lease_store, spawn_upstream, write_envoy_config};
pub use options::StackOptions;
pub use post::Post;

/// How long a service may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one request through Envoy may take (above any follower wait a test configures).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Stack::eventually`] waits: below [`REQUEST_TIMEOUT`], so a condition that
/// never comes true fails with its own message rather than as a request timeout.
const EVENTUALLY_TIMEOUT: Duration = Duration::from_secs(15);

/// How often [`Stack::eventually`] re-checks.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The principal requests carry unless a test says otherwise (header `x-user`, demo policy).
pub const DEFAULT_USER: &str = "alice";

/// The service name both replicas of a two-replica stack are reached by.
pub const SHARED_AUTHORITY: &str = "payments.keyflight.test";

/// The lease-store's admin token in a test stack.
const ADMIN_TOKEN: &str = "e2e-admin-token";

/// The second Envoy and lease-store of a two-replica stack.
struct Replica {
    envoy: ChildGuard,
    lease_store: ChildGuard,
    ports: Ports,
    config_path: PathBuf,
}

/// A running test deployment. Fields drop in declaration order: Envoys stop first.
pub struct Stack {
    second: Option<Replica>,
    envoy: ChildGuard,
    upstream: ChildGuard,
    lease_store: Option<ChildGuard>,
    /// Kept apart from the child: the log outlives a stopped lease-store.
    lease_store_log: PathBuf,
    postgres: Database,
    ports: Ports,
    config_path: PathBuf,
    client: reqwest::Client,
    binaries: Binaries,
    options: StackOptions,
}

impl Stack {
    /// Starts a stack and waits until every part is ready; panics (with logs) otherwise.
    pub async fn start(options: StackOptions) -> Stack {
        let binaries = Binaries::locate();
        let replicas = if options.two_replicas { 2 } else { 1 };
        let lease_stores: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
        let ports = Ports {
            listener: free_port(),
            admin: free_port(),
            lease_stores: lease_stores.clone(),
            upstream: free_port(),
        };

        // Envoy and the upstream start while Postgres initializes: Envoy's clusters are
        // static, so it needs nothing else to be up, and this saves a second per test.
        let config_path = write_envoy_config(&binaries, &ports, &options, true);
        let mut envoy = spawn_envoy(&binaries, &config_path);
        // The second Envoy starts now too; the second lease-store after the first.
        let second_envoy = options.two_replicas.then(|| {
            let second_ports = Ports {
                listener: free_port(),
                admin: free_port(),
                lease_stores: lease_stores.clone(),
                upstream: ports.upstream,
            };
            let path = write_envoy_config(&binaries, &second_ports, &options, false);
            let envoy = spawn_envoy(&binaries, &path);
            (second_ports, envoy, path)
        });
        let mut upstream = spawn_upstream(&binaries, ports.upstream);

        let postgres = if options.replicated {
            Database::Replicated(Box::new(HaCluster::start(HaOptions::default()).await))
        } else {
            Database::Single(PgCluster::start())
        };
        let mut lease_store =
            spawn_lease_store(&binaries, &postgres, ports.lease_store(), &options, true);
        let store_ready = format!("http://127.0.0.1:{}/readyz", ports.lease_store());
        wait_http_ok(&store_ready, READY_TIMEOUT, Some(&mut lease_store)).await;
        // The second store starts once the first has migrated the database.
        let second = match second_envoy {
            Some((second_ports, mut envoy, config_path)) => {
                let store_port = lease_stores[1];
                let mut lease_store =
                    spawn_lease_store(&binaries, &postgres, store_port, &options, false);
                let ready = format!("http://127.0.0.1:{store_port}/readyz");
                wait_http_ok(&ready, READY_TIMEOUT, Some(&mut lease_store)).await;
                let ready = format!("http://127.0.0.1:{}/ready", second_ports.admin);
                wait_http_ok(&ready, READY_TIMEOUT, Some(&mut envoy)).await;
                Some(Replica {
                    envoy,
                    lease_store,
                    ports: second_ports,
                    config_path,
                })
            }
            None => None,
        };
        let upstream_ready = format!("http://127.0.0.1:{}/stats", ports.upstream);
        wait_http_ok(&upstream_ready, READY_TIMEOUT, Some(&mut upstream)).await;
        let envoy_ready = format!("http://127.0.0.1:{}/ready", ports.admin);
        wait_http_ok(&envoy_ready, READY_TIMEOUT, Some(&mut envoy)).await;

        Stack {
            second,
            envoy,
            upstream,
            lease_store_log: lease_store.log_path().to_path_buf(),
            lease_store: Some(lease_store),
            postgres,
            ports,
            config_path,
            client: http_client(),
            binaries,
            options,
        }
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
            listener: self.ports_of(replica).listener,
            path: path.to_owned(),
            headers: vec![
                ("x-user".into(), DEFAULT_USER.into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: Vec::new(),
            timeout: None,
        };
        match self.second {
            Some(_) => post.header("host", SHARED_AUTHORITY),
            None => post,
        }
    }

    /// The port of Envoy replica `replica`'s listener, for raw requests ([`crate::raw_http`]).
    pub fn listener_port(&self, replica: usize) -> u16 {
        self.ports_of(replica).listener
    }

    /// `http://127.0.0.1:PORT{path}` on Envoy replica 0's listener, for clients other than
    /// [`Stack::post`] (the `keyflight` client command).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.listener)
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

    /// The upstream's `/stats`: `{"executions": N, "by_path": {...}}`.
    pub async fn upstream_stats(&self) -> Value {
        self.get_json(&format!("http://127.0.0.1:{}/stats", self.ports.upstream))
            .await
    }

    /// How many handlers wait at the upstream's gate `name`.
    pub async fn gate_waiting(&self, name: &str) -> u64 {
        let url = format!("http://127.0.0.1:{}/gates/{name}", self.ports.upstream);
        self.get_json(&url).await["waiting"]
            .as_u64()
            .unwrap_or_else(|| panic!("upstream gate status has no `waiting`"))
    }

    /// Opens the upstream's gate `name` for good.
    pub async fn open_gate(&self, name: &str) {
        let url = format!("http://127.0.0.1:{}/gates/{name}/open", self.ports.upstream);
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
            "http://127.0.0.1:{}/metrics",
            self.lease_store_port(replica)
        );
        StoreMetrics::parse(&self.get_text(&url).await)
    }

    /// Lease-store event `name` summed over every lease-store replica: in a two-replica
    /// stack either replica may have served a given call.
    pub async fn store_event_total(&self, name: &str) -> u64 {
        let mut total = 0;
        for replica in 0..self.ports.lease_stores.len() {
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
        self.envoy.log()
    }

    /// Runs `lease-store records ARGS` (the operator CLI) against lease-store replica 0
    /// with the admin token; returns stdout, panicking with stderr when it fails.
    pub async fn records_cli(&self, args: &[&str]) -> String {
        let output = tokio::process::Command::new(&self.binaries.lease_store)
            .arg("records")
            .args(args)
            .env(
                "KEYFLIGHT_URL",
                format!("http://127.0.0.1:{}", self.ports.lease_store()),
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

    /// Runs `sql` on the stack's database with `psql` (see [`PgCluster::psql`]).
    pub fn sql(&self, sql: &str) -> String {
        self.postgres.single().psql(sql)
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
            "http://127.0.0.1:{}/v1/claims/{}",
            self.ports.lease_store(),
            scope.to_hex()
        );
        let body = serde_json::json!({
            "fingerprint": keyflight_protocol::Digest::of(b"probe").to_hex(),
            "lease_ms": 1000,
        });
        match self
            .client
            .post(&url)
            .bearer_auth(self.options.filter_token())
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
        // Envoy files proxy-wasm metrics under the `wasmcustom.` prefix.
        self.envoy_stat_at(replica, &format!("wasmcustom.keyflight.{name}"))
            .await
    }

    /// Envoy's own counter `stat` (e.g. `cluster.demo_upstream.upstream_rq_retry`) on
    /// replica 0; `0` when it was never incremented.
    pub async fn envoy_stat(&self, stat: &str) -> u64 {
        self.envoy_stat_at(0, stat).await
    }

    /// [`Stack::envoy_stat`] of Envoy replica `replica`.
    pub async fn envoy_stat_at(&self, replica: usize, stat: &str) -> u64 {
        let url = format!(
            "http://127.0.0.1:{}/stats?filter=^{stat}$",
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
        match (replica, &self.second) {
            (0, _) => &self.ports,
            (1, Some(second)) => &second.ports,
            _ => panic!("there is no replica {replica} (StackOptions::two_replicas starts two)"),
        }
    }

    fn lease_store_port(&self, replica: usize) -> u16 {
        *self.ports.lease_stores.get(replica).unwrap_or_else(|| {
            panic!(
                "there is no lease-store replica {replica} (StackOptions::two_replicas starts two)"
            )
        })
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

impl Drop for Stack {
    fn drop(&mut self) {
        let mut logs = vec![
            self.envoy.log_path().to_path_buf(),
            self.upstream.log_path().to_path_buf(),
            self.lease_store_log.clone(),
            self.config_path.clone(),
        ];
        if self.options.listener_from_file {
            logs.push(lds_path_of(&self.config_path));
        }
        if let Some(second) = &self.second {
            logs.extend([
                second.envoy.log_path().to_path_buf(),
                second.lease_store.log_path().to_path_buf(),
                second.config_path.clone(),
            ]);
        }
        if std::thread::panicking() {
            eprintln!("keyflight e2e: the test failed; kept for inspection:");
            for path in logs {
                eprintln!("  {}", path.display());
            }
            eprintln!("--- Envoy log tail ---\n{}", self.envoy.log_tail());
            if let Some(second) = &self.second {
                eprintln!(
                    "--- Envoy replica 1 log tail ---\n{}",
                    second.envoy.log_tail()
                );
            }
        } else {
            for path in logs {
                // Best effort: a leftover log in the temp dir harms nothing.
                let _ = std::fs::remove_file(path);
            }
        }
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
