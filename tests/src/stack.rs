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

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use keyflight_testkit::ha::{HaCluster, HaOptions};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::{ChildGuard, Signal, free_port, wait_http_ok};
use serde_json::{Map, Value};

use crate::binaries::Binaries;
use crate::envoy_config::{self, Ports};
use crate::envoy_variants::EnvoyEdit;
use crate::lds;
use crate::metrics::StoreMetrics;
use crate::reply::Reply;

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

/// What a test stack runs: the plugin configuration Envoy hands the filter, how many
/// Envoy + lease-store replicas, and edits of the Envoy config.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The plugin JSON (`config.configuration` of the wasm filter).
    pub plugin: Value,
    /// Two Envoys and two lease-stores instead of one each.
    two_replicas: bool,
    /// Applied in order to every rendered Envoy config.
    envoy_edits: Vec<EnvoyEdit>,
    /// Extra environment of every lease-store (e.g. `KEYFLIGHT_MAX_BODY_BYTES`).
    store_env: Vec<(String, String)>,
    /// Serve replica 0's listener from an LDS file, so [`Stack::reconfigure`] can push a
    /// new plugin configuration.
    listener_from_file: bool,
    /// Run on a replicated Postgres (etcd + two Patroni nodes) instead of one node.
    replicated: bool,
}

impl Default for StackOptions {
    /// The plugin configuration `envoy/demo.yaml` ships, one replica.
    fn default() -> Self {
        let plugin = envoy_config::shipped_plugin_config(&envoy_config::shipped_demo_yaml())
            .unwrap_or_else(|e| panic!("{e}"));
        StackOptions {
            plugin,
            two_replicas: false,
            envoy_edits: Vec::new(),
            store_env: Vec::new(),
            listener_from_file: false,
            replicated: false,
        }
    }
}

impl StackOptions {
    /// Edits the first policy (the demo's `payments` policy).
    pub fn policy(mut self, edit: impl FnOnce(&mut Map<String, Value>)) -> Self {
        let policy = self.plugin["policies"][0]
            .as_object_mut()
            .unwrap_or_else(|| panic!("the plugin config has no policies[0] object"));
        edit(policy);
        self
    }

    /// Edits the whole plugin JSON.
    pub fn plugin(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        edit(&mut self.plugin);
        self
    }

    /// Runs the two-replica set-up: two Envoys and two lease-stores on the same Postgres, in
    /// front of the same upstream; both Envoys run `envoy/two-replicas.yaml`, which reaches
    /// both lease-stores.
    pub fn two_replicas(mut self) -> Self {
        self.two_replicas = true;
        self
    }

    /// Changes the Envoy config beyond the plugin JSON (see [`EnvoyEdit`]).
    pub fn envoy(mut self, edit: EnvoyEdit) -> Self {
        self.envoy_edits.push(edit);
        self
    }

    /// Serves replica 0's listener from a file (LDS) instead of the bootstrap, so that
    /// [`Stack::reconfigure`] can push a new plugin configuration while Envoy runs.
    pub fn reconfigurable(mut self) -> Self {
        self.listener_from_file = true;
        self
    }

    /// Runs the database as a replicated Postgres that fails over (etcd + two Patroni nodes
    /// in synchronous mode); the lease-store gets the multi-host URL with
    /// `target_session_attrs=read-write`. Needs `make ha-prereqs`.
    pub fn replicated_postgres(mut self) -> Self {
        self.replicated = true;
        self
    }

    /// Sets an environment variable of every lease-store the stack starts.
    pub fn store_env(mut self, name: &str, value: &str) -> Self {
        self.store_env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The token the filter presents to the lease-store, as the plugin JSON says.
    fn filter_token(&self) -> String {
        self.plugin["lease_store"]["token"]
            .as_str()
            .unwrap_or("e2e-filter-token")
            .to_owned()
    }
}

/// The database a stack runs on.
enum Database {
    /// One throwaway node.
    Single(PgCluster),
    /// etcd + two Patroni nodes (boxed: it is much the larger).
    Replicated(Box<HaCluster>),
}

impl Database {
    /// The URL the lease-store is given.
    fn url(&self) -> String {
        match self {
            Database::Single(cluster) => cluster.url(),
            Database::Replicated(cluster) => cluster.url(),
        }
    }

    /// Runs `sql` with `psql` on a single-node database.
    fn psql(&self, sql: &str) -> String {
        self.single().psql(sql)
    }

    fn single(&self) -> &PgCluster {
        match self {
            Database::Single(cluster) => cluster,
            Database::Replicated(_) => {
                panic!("this needs a single-node database; a replicated stack's is Stack::ha()")
            }
        }
    }
}

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

    /// Kills the lease-store (`SIGKILL`) and waits until it is gone.
    pub fn stop_lease_store(&mut self) {
        if let Some(mut store) = self.lease_store.take() {
            store.kill();
        }
    }

    /// Pushes a new plugin configuration to replica 0 (a [`StackOptions::reconfigurable`]
    /// stack), as a control plane does: Envoy builds a new listener with it and drains the
    /// old one. Returns once Envoy has accepted the update.
    pub async fn reconfigure(&mut self, edit: impl FnOnce(&mut Value)) {
        assert!(
            self.options.listener_from_file,
            "reconfigure needs StackOptions::reconfigurable"
        );
        edit(&mut self.options.plugin);
        let rendered = render_for(&self.binaries, &self.ports, &self.options);
        let lds_path = lds_path_of(&self.config_path);
        let split = lds::split(&rendered, &lds_path).unwrap_or_else(|e| panic!("{e}"));
        let updates_before = self.envoy_stat("listener_manager.lds.update_success").await;
        lds::write_atomically(&lds_path, &split.listeners)
            .unwrap_or_else(|e| panic!("write {}: {e}", lds_path.display()));
        self.eventually("Envoy accepted the new listener", || async {
            self.envoy_stat("listener_manager.lds.update_success").await > updates_before
        })
        .await;
    }

    /// Everything Envoy replica 0 logged so far.
    pub fn envoy_log(&self) -> String {
        self.envoy.log()
    }

    /// Starts lease-store replica 0 again on its port (after [`Stack::stop_lease_store`],
    /// or killing it at once if it still runs) and waits until it is ready: a pod restart.
    pub async fn restart_lease_store(&mut self) {
        self.stop_lease_store();
        let mut store = spawn_lease_store(
            &self.binaries,
            &self.postgres,
            self.ports.lease_store(),
            &self.options,
            false,
        );
        let ready = format!("http://127.0.0.1:{}/readyz", self.ports.lease_store());
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut store)).await;
        self.lease_store_log = store.log_path().to_path_buf();
        self.lease_store = Some(store);
    }

    /// Sends `signal` to lease-store replica `replica` (`Stop` freezes it: a hung store).
    pub fn signal_lease_store(&self, replica: usize, signal: Signal) {
        match (replica, &self.lease_store, &self.second) {
            (0, Some(store), _) => store.signal(signal),
            (1, _, Some(second)) => second.lease_store.signal(signal),
            _ => panic!("lease-store replica {replica} is not running"),
        }
    }

    /// Kills Envoy replica `replica` with `SIGKILL`: a crashed proxy, whose streams end
    /// unfinished. Takes `&self` so requests in flight through the stack can be cut off;
    /// the dead process is reaped when the stack drops.
    pub fn kill_envoy(&self, replica: usize) {
        self.signal_envoy(replica, Signal::Kill);
    }

    /// Sends `signal` to Envoy replica `replica` (`Stop` freezes it: a stalled proxy that
    /// neither renews its leases nor answers, until `Cont`).
    pub fn signal_envoy(&self, replica: usize, signal: Signal) {
        match (replica, &self.second) {
            (0, _) => self.envoy.signal(signal),
            (1, Some(second)) => second.envoy.signal(signal),
            _ => panic!("there is no Envoy replica {replica}"),
        }
    }

    /// Kills the upstream with `SIGKILL`: requests it holds are cut off mid-answer (see
    /// [`Stack::restart_upstream`]).
    pub fn kill_upstream(&self) {
        self.upstream.signal(Signal::Kill);
    }

    /// Starts a fresh upstream on the same port (its counters start at zero) and waits
    /// until it answers.
    pub async fn restart_upstream(&mut self) {
        self.upstream.kill();
        self.upstream = spawn_upstream(&self.binaries, self.ports.upstream);
        let ready = format!("http://127.0.0.1:{}/stats", self.ports.upstream);
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut self.upstream)).await;
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
        self.postgres.psql(sql)
    }

    /// Stops Postgres at once, as a crash would (the lease-store keeps running).
    pub fn stop_postgres(&self) {
        self.postgres.single().stop();
    }

    /// Starts Postgres again after [`Stack::stop_postgres`] (crash recovery runs).
    pub fn restart_postgres(&self) {
        self.postgres.single().restart();
    }

    /// The replicated database of a [`StackOptions::replicated_postgres`] stack, for its
    /// faults (kill the primary's node, …). Panics on a single-node stack.
    pub fn ha(&self) -> &HaCluster {
        match &self.postgres {
            Database::Replicated(cluster) => cluster,
            Database::Single(_) => {
                panic!("not a replicated stack: use StackOptions::replicated_postgres")
            }
        }
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

/// A request being built by [`Stack::post`].
pub struct Post<'a> {
    stack: &'a Stack,
    listener: u16,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

impl Post<'_> {
    /// Gives up on the answer after `timeout`: a caller that times out and hangs up.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Adds an `Idempotency-Key` header (call twice to send it twice).
    pub fn key(self, key: &str) -> Self {
        self.header("idempotency-key", key)
    }

    /// Adds a header (repeats allowed; see [`Post::content_type`] and [`Post::user`] to
    /// replace the defaults).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sends the request as principal `user` instead of [`DEFAULT_USER`].
    pub fn user(mut self, user: &str) -> Self {
        self.headers.retain(|(name, _)| name != "x-user");
        self.header("x-user", user)
    }

    /// Replaces the default `content-type: application/json`.
    pub fn content_type(mut self, content_type: &str) -> Self {
        self.headers.retain(|(name, _)| name != "content-type");
        self.header("content-type", content_type)
    }

    /// Sends the request with no principal header at all.
    pub fn anonymous(mut self) -> Self {
        self.headers.retain(|(name, _)| name != "x-user");
        self
    }

    /// Sends a JSON body.
    pub fn json(mut self, body: &Value) -> Self {
        self.body = body.to_string().into_bytes();
        self
    }

    /// Sends raw body bytes.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends the request and reads the whole answer.
    pub async fn send(self) -> Reply {
        let url = format!("http://127.0.0.1:{}{}", self.listener, self.path);
        self.try_send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e:?}"))
    }

    /// Sends the request; an error when no complete answer came back (e.g. Envoy died).
    pub async fn try_send(self) -> Result<Reply, reqwest::Error> {
        let url = format!("http://127.0.0.1:{}{}", self.listener, self.path);
        let mut request = self.stack.client.post(&url).body(self.body);
        if let Some(timeout) = self.timeout {
            request = request.timeout(timeout);
        }
        for (name, value) in &self.headers {
            let value = reqwest::header::HeaderValue::from_bytes(value.as_bytes())
                .unwrap_or_else(|e| panic!("header {name}: {value:?} cannot be sent: {e}"));
            request = request.header(name.as_str(), value);
        }
        let response = request.send().await?;
        Reply::try_read(response).await
    }
}

/// The outcome of starting Envoy alone with a plugin configuration.
#[derive(Debug)]
pub enum EnvoyStart {
    /// Envoy exited during start-up, with this status and log.
    Exited {
        /// Exit status.
        status: std::process::ExitStatus,
        /// Everything Envoy logged.
        log: String,
    },
    /// Envoy reported ready; it was then stopped. Its log up to that point.
    Ready {
        /// Everything Envoy logged.
        log: String,
    },
}

/// Starts Envoy with `plugin` and no lease-store or upstream behind it, to see whether the
/// plugin configuration is accepted: tests of configuration errors need nothing else.
pub async fn start_envoy_alone(plugin: &Value) -> EnvoyStart {
    let binaries = Binaries::locate();
    let ports = Ports {
        listener: free_port(),
        admin: free_port(),
        lease_stores: vec![free_port()],
        upstream: free_port(),
    };
    let options = StackOptions {
        plugin: plugin.clone(),
        ..StackOptions::default()
    };
    let config_path = write_envoy_config(&binaries, &ports, &options, true);
    let mut envoy = spawn_envoy(&binaries, &config_path);
    let client = http_client();
    let ready_url = format!("http://127.0.0.1:{}/ready", ports.admin);
    let deadline = Instant::now() + READY_TIMEOUT;
    let outcome = loop {
        if let Some(status) = envoy.try_wait() {
            break EnvoyStart::Exited {
                status,
                log: envoy.log(),
            };
        }
        if let Ok(response) = client.get(&ready_url).send().await
            && response.status().is_success()
        {
            break EnvoyStart::Ready { log: envoy.log() };
        }
        assert!(
            Instant::now() < deadline,
            "Envoy neither exited nor became ready within {READY_TIMEOUT:?}; log tail:\n{}",
            envoy.log_tail()
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    };
    let _ = std::fs::remove_file(&config_path);
    let _ = std::fs::remove_file(envoy.log_path());
    outcome
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        // A 3xx is an answer to assert on (F6), not a hop to follow.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_else(|e| panic!("build an HTTP client: {e}"))
}

/// Renders the shipped config for these ports and options into a fresh temp file:
/// `envoy/demo.yaml` for one lease-store, `envoy/two-replicas.yaml` for two. Only replica
/// 0's listener (`first`) is served from a file when the stack is reconfigurable.
fn write_envoy_config(
    binaries: &Binaries,
    ports: &Ports,
    options: &StackOptions,
    first: bool,
) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let rendered = render_for(binaries, ports, options);
    let path = std::env::temp_dir().join(format!(
        "keyflight-e2e-envoy-{}-{}.yaml",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let write = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()))
    };
    if options.listener_from_file && first {
        let lds_path = lds_path_of(&path);
        let split = lds::split(&rendered, &lds_path).unwrap_or_else(|e| panic!("{e}"));
        write(&lds_path, &split.listeners);
        write(&path, &split.bootstrap);
    } else {
        write(&path, &rendered);
    }
    path
}

/// The shipped config for these ports, with the wasm, the plugin JSON and the edits.
fn render_for(binaries: &Binaries, ports: &Ports, options: &StackOptions) -> String {
    let wasm = binaries.wasm.display().to_string();
    let mut rendered = envoy_config::render_shipped(ports, &wasm, &options.plugin)
        .unwrap_or_else(|e| panic!("{e}"));
    for edit in &options.envoy_edits {
        rendered = edit.apply(&rendered).unwrap_or_else(|e| panic!("{e}"));
    }
    rendered
}

/// Where the listener of the bootstrap at `config` lives when it is served from a file.
fn lds_path_of(config: &std::path::Path) -> PathBuf {
    config.with_extension("lds.json")
}

fn spawn_envoy(binaries: &Binaries, config: &std::path::Path) -> ChildGuard {
    ChildGuard::spawn("envoy", envoy_command(binaries, config))
}

fn spawn_upstream(binaries: &Binaries, port: u16) -> ChildGuard {
    ChildGuard::spawn("demo-upstream", upstream_command(binaries, port))
}

/// Starts a lease-store on `port` over `postgres` with the stack's extra environment;
/// `migrate` applies the migrations first (one replica does; the other starts once they
/// are in).
fn spawn_lease_store(
    binaries: &Binaries,
    postgres: &Database,
    port: u16,
    options: &StackOptions,
    migrate: bool,
) -> ChildGuard {
    let token = options.filter_token();
    let mut command = lease_store_command(binaries, &postgres.url(), port, &token, migrate);
    command.envs(options.store_env.iter().map(|(k, v)| (k, v)));
    ChildGuard::spawn("lease-store", command)
}

/// The command that runs Envoy on the rendered `config`, as every stack runs it.
pub fn envoy_command(binaries: &Binaries, config: &std::path::Path) -> Command {
    let mut command = Command::new(&binaries.envoy);
    command.arg("-c").arg(config).args([
        "--disable-hot-restart",
        "--concurrency",
        "2",
        "--log-level",
        "info",
        // A listener replaced by a new configuration (StackOptions::reconfigurable) is
        // drained for this long, then closed and its plugin retired.
        "--drain-time-s",
        "1",
        "--drain-strategy",
        "immediate",
    ]);
    command
}

/// The command that runs the demo upstream on `127.0.0.1:port`.
pub fn upstream_command(binaries: &Binaries, port: u16) -> Command {
    let mut command = Command::new(&binaries.upstream);
    command.args(["--listen", &format!("127.0.0.1:{port}")]);
    command
}

/// The command that runs a lease-store on `127.0.0.1:port` over `database_url`, accepting
/// the filter's `token` (and the stack's admin token); `migrate` applies the migrations
/// first.
pub fn lease_store_command(
    binaries: &Binaries,
    database_url: &str,
    port: u16,
    token: &str,
    migrate: bool,
) -> Command {
    let mut command = Command::new(&binaries.lease_store);
    command.arg("serve");
    if migrate {
        command.arg("--migrate");
    }
    command
        .env("KEYFLIGHT_DATABASE_URL", database_url)
        .env("KEYFLIGHT_LISTEN", format!("127.0.0.1:{port}"))
        .env("KEYFLIGHT_TOKEN", token)
        .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN_TOKEN);
    command
}
