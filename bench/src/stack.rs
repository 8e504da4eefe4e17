//! The stack under test: durable Postgres, lease-store, demo upstream, and the guarded
//! Envoy, started by the one launcher (`keyflight_testkit::stack`) with production
//! durability (`fsync` and `synchronous_commit` on); beside it, started on demand, the plain
//! Envoy (no filter, plus a `direct_response` route, see [`crate::envoy`]), the filter-floor
//! Envoy, guarded variants, the native adapter's Envoy and a second lease-store for A/Bs in
//! one run.
//!
//! Every Envoy runs `--concurrency 2`: one worker per core of the 2-core machine this was
//! built on, as every stack of the launcher runs it. Equal worker counts are what makes
//! guarded vs plain a fair comparison; fewer workers than cores would cap both sides at one
//! core and hide the filter's CPU cost behind idle capacity. `--log-level warn`: Envoy's
//! info logging is not what is measured.

use std::path::{Path, PathBuf};
use std::process::Command;

use keyflight_testkit::binaries::Binaries;
use keyflight_testkit::envoy_config::Ports;
use keyflight_testkit::pg::{PgCluster, PgOptions};
use keyflight_testkit::stack::{ExtraEnvoy, ExtraStore, Stack, StackOptions};
use serde_json::Value;

use crate::envoy;
use crate::error::BenchError;
use crate::procfs::{self, Watched};

/// Envoy worker threads, the same on every side.
pub const ENVOY_WORKERS: u32 = 2;

/// The stack's own guarded Envoy: its process and ports.
pub struct Envoy {
    pid: u32,
    /// Its listener and admin ports.
    pub ports: Ports,
}

impl Envoy {
    /// Envoy's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `http://127.0.0.1:LISTENER{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.listener)
    }
}

/// The running stack. Fields drop in order: extra Envoys and stores first, the stack last.
pub struct BenchStack {
    /// The plain Envoy, once [`BenchStack::start_plain_envoy`] ran.
    pub plain: Option<ExtraEnvoy>,
    /// A second lease-store with other settings ([`BenchStack::start_variant_store`]).
    variant_store: Option<ExtraStore>,
    /// A lease-store on a partitioned database ([`BenchStack::start_partitioned_store`]).
    partitioned: Option<Partitioned>,
    /// The Envoy with the keyflight filter.
    pub guarded: Envoy,
    /// The plugin JSON the guarded Envoy runs (the shipped demo policy).
    pub plugin: Value,
    stack: Stack,
}

impl BenchStack {
    /// Starts Postgres (durable), lease-store, upstream and the guarded Envoy; Envoy
    /// configs and logs go under `config_dir`. The lease-store and upstream are the release
    /// builds unless the environment names others (`keyflight_testkit::binaries`): the
    /// test stack's debug builds would measure the compiler's settings, not the code.
    pub async fn start(config_dir: &Path) -> Result<BenchStack, BenchError> {
        let options = StackOptions::default()
            .binaries(Binaries::locate_profile("release"))
            .durable_postgres()
            .run_dir(config_dir)
            .envoy_log_level("warn");
        let plugin = options.plugin.clone();
        let stack = Stack::start(options).await;
        prime_records(stack.database().single());
        let guarded = Envoy {
            pid: stack
                .envoy_pid(0)
                .ok_or_else(|| BenchError::Answer("the guarded Envoy is not running".into()))?,
            ports: stack.envoy_ports(0).clone(),
        };
        Ok(BenchStack {
            plain: None,
            variant_store: None,
            partitioned: None,
            guarded,
            plugin,
            stack,
        })
    }

    /// Starts the plain Envoy (no filter), whose `direct_response` route answers `status`
    /// and `body`: what a replay answers, so P2 compares like with like.
    pub async fn start_plain_envoy(&mut self, status: u16, body: &str) -> Result<(), BenchError> {
        let envoy = self
            .start_direct_envoy("plain", false, status, body)
            .await?;
        self.plain = Some(envoy);
        Ok(())
    }

    /// Starts an Envoy with the keyflight filter loaded AND the same `direct_response` route
    /// as the plain one. No policy matches that route, so the filter only sees the stream
    /// pass: what any wasm filter in the chain costs, the floor under P2's replay.
    pub async fn start_filter_floor_envoy(
        &self,
        status: u16,
        body: &str,
    ) -> Result<ExtraEnvoy, BenchError> {
        self.start_direct_envoy("filter-floor", true, status, body)
            .await
    }

    /// Starts an Envoy with the `direct_response` route, with or without the keyflight
    /// filter, and waits until it is ready.
    async fn start_direct_envoy(
        &self,
        name: &str,
        with_filter: bool,
        status: u16,
        body: &str,
    ) -> Result<ExtraEnvoy, BenchError> {
        let ports = self.stack.fresh_envoy_ports();
        let yaml = self.stack.render_demo_envoy(&ports, &self.plugin);
        let yaml = if with_filter {
            yaml
        } else {
            envoy::without_filter(&yaml)?
        };
        let yaml = envoy::with_direct_response(&yaml, status, body)?;
        self.stack
            .start_extra_envoy(name, &yaml, ports)
            .await
            .map_err(BenchError::Answer)
    }

    /// Starts an Envoy with the native adapter (`envoy/native-demo.yaml`: the dynamic module
    /// in place of the Wasm filter, the same plugin JSON, listener, router and clusters) on
    /// the stack's lease-store; with `direct` (status, body), the `direct_response` route of
    /// [`BenchStack::start_filter_floor_envoy`] too. Envoy finds the module in
    /// `KEYFLIGHT_NATIVE_DIR` (`scripts/bench.sh`: `target/release`).
    pub async fn start_native_envoy(
        &self,
        name: &str,
        direct: Option<(u16, &str)>,
    ) -> Result<ExtraEnvoy, BenchError> {
        let module = keyflight_testkit::binaries::native_module_dir()
            .join(keyflight_testkit::binaries::NATIVE_MODULE_FILE);
        if !module.is_file() {
            return Err(BenchError::Input(format!(
                "{} not found (make native; KEYFLIGHT_NATIVE_DIR names its directory)",
                module.display()
            )));
        }
        let ports = self.stack.fresh_envoy_ports();
        let yaml = keyflight_testkit::envoy_config::render_native(&ports, &self.plugin)
            .map_err(|e| BenchError::Input(e.0))?;
        let yaml = match direct {
            Some((status, body)) => envoy::with_direct_response(&yaml, status, body)?,
            None => yaml,
        };
        self.stack
            .start_extra_envoy(name, &yaml, ports)
            .await
            .map_err(BenchError::Answer)
    }

    /// Starts a second lease-store on the same database, with `env` on top of the first
    /// one's environment (an A/B of store settings in one run), and waits until it is ready.
    pub async fn start_variant_store(
        &mut self,
        env: &[(String, String)],
    ) -> Result<(), BenchError> {
        self.variant_store = Some(self.stack.start_extra_store("variant", env).await);
        Ok(())
    }

    /// The second lease-store's `host:port` and process id, once started.
    pub fn variant_store(&self) -> Option<(String, u32)> {
        self.variant_store
            .as_ref()
            .map(|store| (format!("127.0.0.1:{}", store.port), store.pid()))
    }

    /// Starts another guarded Envoy, with the shipped plugin, whose lease-store is the
    /// second one ([`BenchStack::start_variant_store`]).
    pub async fn start_guarded_on_variant_store(
        &self,
        name: &str,
    ) -> Result<ExtraEnvoy, BenchError> {
        let store = self
            .variant_store
            .as_ref()
            .ok_or_else(|| BenchError::Input("no second lease-store was started".into()))?;
        let ports = Ports {
            lease_stores: vec![store.port],
            ..self.stack.fresh_envoy_ports()
        };
        self.start_guarded(name, |_| {}, ports).await
    }

    /// Starts a lease-store on `partitions` durable Postgres partitions behind a PL/Proxy
    /// router of its own (`docs/distributed-sql.md#plproxy-partitioned-postgres`), migrated
    /// as `lease-store migrate` does, and waits until it is ready.
    pub async fn start_partitioned_store(&mut self, partitions: usize) -> Result<(), BenchError> {
        let durable = PgOptions {
            durable: true,
            ..PgOptions::default()
        };
        let mut clusters = Vec::with_capacity(partitions + 1);
        for _ in 0..=partitions {
            let cluster = tokio::task::spawn_blocking(move || PgCluster::start_with(durable))
                .await
                .map_err(|e| BenchError::Answer(format!("starting a partition: {e}")))?;
            clusters.push(cluster);
        }
        let router = clusters.remove(0);
        let urls: Vec<String> = clusters.iter().map(PgCluster::url).collect();
        self.migrate_partitioned(&router.url(), &urls).await?;
        for partition in &clusters {
            prime_records(partition);
        }
        let env = [
            ("KEYFLIGHT_DATABASE_URL".to_owned(), router.url()),
            ("KEYFLIGHT_PARTITION_URLS".to_owned(), urls.join(",")),
        ];
        let store = self.stack.start_extra_store("partitioned", &env).await;
        self.partitioned = Some(Partitioned {
            store,
            router,
            partitions: clusters,
        });
        Ok(())
    }

    /// Runs `lease-store migrate` on the router and its partitions, as an operator would:
    /// the bench starts the store as a program and never links it.
    async fn migrate_partitioned(
        &self,
        router: &str,
        partitions: &[String],
    ) -> Result<(), BenchError> {
        let mut command = Command::new(&self.stack.binaries().lease_store);
        command
            .arg("migrate")
            .env("KEYFLIGHT_DATABASE_URL", router)
            .env("KEYFLIGHT_PARTITION_URLS", partitions.join(","));
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| BenchError::Answer(format!("the migrate task failed: {e}")))?
            .map_err(BenchError::io("run lease-store migrate"))?;
        if !output.status.success() {
            return Err(BenchError::Answer(format!(
                "migrating the partitions: lease-store migrate exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(())
    }

    /// The partitioned lease-store's `host:port` and process id, and its databases'
    /// processes (the router's, the partitions'), once started.
    pub fn partitioned_store(&self) -> Option<(String, u32, Vec<Watched>, Vec<Watched>)> {
        self.partitioned.as_ref().map(|p| {
            let watch = |clusters: &[&PgCluster]| -> Vec<Watched> {
                clusters
                    .iter()
                    .filter_map(|cluster| procfs::postmaster(cluster.port()).map(Watched::Tree))
                    .collect()
            };
            let partitions: Vec<&PgCluster> = p.partitions.iter().collect();
            (
                format!("127.0.0.1:{}", p.store.port),
                p.store.pid(),
                watch(&[&p.router]),
                watch(&partitions),
            )
        })
    }

    /// Starts another guarded Envoy, with the shipped plugin, whose lease-store is the
    /// partitioned one ([`BenchStack::start_partitioned_store`]).
    pub async fn start_guarded_on_partitioned_store(&self) -> Result<ExtraEnvoy, BenchError> {
        let store = self
            .partitioned
            .as_ref()
            .ok_or_else(|| BenchError::Input("no partitioned lease-store was started".into()))?;
        let ports = Ports {
            lease_stores: vec![store.store.port],
            ..self.stack.fresh_envoy_ports()
        };
        self.start_guarded("partitioned", |_| {}, ports).await
    }

    /// Starts another guarded Envoy, with the shipped plugin, whose lease-store listens on
    /// `store_port` (the edge floor's stub, [`crate::floor::stub`]).
    pub async fn start_guarded_on_port(
        &self,
        name: &str,
        store_port: u16,
    ) -> Result<ExtraEnvoy, BenchError> {
        let ports = Ports {
            lease_stores: vec![store_port],
            ..self.stack.fresh_envoy_ports()
        };
        self.start_guarded(name, |_| {}, ports).await
    }

    /// Starts another guarded Envoy as `make up` runs it: the launcher's own options, which
    /// the bench's guarded Envoy changes only in its log level (`warn`). Measured beside it,
    /// the two cannot drift apart unseen (`bench/README.md#the-shipped-configuration`).
    pub async fn start_guarded_as_shipped(&self, name: &str) -> Result<ExtraEnvoy, BenchError> {
        let ports = self.stack.fresh_envoy_ports();
        let yaml = self.stack.render_demo_envoy(&ports, &self.plugin);
        self.stack
            .start_extra_envoy_logging(name, &yaml, ports, StackOptions::default().envoy_logging())
            .await
            .map_err(BenchError::Answer)
    }

    /// Starts another guarded Envoy whose plugin JSON is the shipped one changed by `edit`
    /// (e.g. the edge cache off). An Envoy that refuses the plugin is an error, not a panic:
    /// the filter build under test may not know the field.
    pub async fn start_guarded_variant(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<ExtraEnvoy, BenchError> {
        self.start_guarded(name, edit, self.stack.fresh_envoy_ports())
            .await
    }

    async fn start_guarded(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Value),
        ports: Ports,
    ) -> Result<ExtraEnvoy, BenchError> {
        let mut plugin = self.plugin.clone();
        edit(&mut plugin);
        let yaml = self.stack.render_demo_envoy(&ports, &plugin);
        self.stack
            .start_extra_envoy(name, &yaml, ports)
            .await
            .map_err(BenchError::Answer)
    }

    /// The plain Envoy; an error before [`BenchStack::start_plain_envoy`].
    pub fn plain(&self) -> Result<&ExtraEnvoy, BenchError> {
        self.plain
            .as_ref()
            .ok_or_else(|| BenchError::Input("the plain Envoy has not been started".into()))
    }

    /// The lease-store's `host:port`.
    pub fn store_authority(&self) -> String {
        format!("127.0.0.1:{}", self.stack.store_port(0))
    }

    /// The guarded Envoy's admin `host:port`.
    pub fn guarded_admin_authority(&self) -> String {
        format!("127.0.0.1:{}", self.guarded.ports.admin)
    }

    /// The upstream's `host:port`.
    pub fn upstream_authority(&self) -> String {
        format!("127.0.0.1:{}", self.stack.upstream_port())
    }

    /// The filter's bearer token (what the lease-store accepts on `/v1/claims`).
    pub fn filter_token(&self) -> String {
        self.stack.options().filter_token()
    }

    /// Postgres' TCP port.
    pub fn postgres_port(&self) -> u16 {
        self.stack.database().single().port()
    }

    /// Postgres' data directory, as the server reports it.
    pub fn postgres_data_dir(&self) -> PathBuf {
        PathBuf::from(
            self.stack
                .database()
                .single()
                .psql("SHOW data_directory")
                .trim(),
        )
    }

    /// The lease-store's process id.
    pub fn lease_store_pid(&self) -> u32 {
        self.stack.store_pid(0).unwrap_or(0)
    }

    /// The upstream's process id.
    pub fn upstream_pid(&self) -> u32 {
        self.stack.upstream_pid().unwrap_or(0)
    }

    /// Postgres as a process tree (postmaster and backends), when it can be found.
    pub fn postgres_watch(&self) -> Option<Watched> {
        procfs::postmaster(self.postgres_port()).map(Watched::Tree)
    }

    /// The filter's `.wasm` file.
    pub fn wasm_path(&self) -> &Path {
        &self.stack.binaries().wasm
    }
}

/// A lease-store on a partitioned database, and the databases (dropped after the store).
struct Partitioned {
    store: ExtraStore,
    router: PgCluster,
    partitions: Vec<PgCluster>,
}

/// Settled records a database holds before anything is measured.
const PRIMED_RECORDS: u32 = 100_000;

/// Gives a records table settled rows and statistics before anything is measured, as
/// `pgbench -i` vacuums and analyzes its tables: a store measured on a new, empty table
/// would be measured in its first minute, whose plans scan the table until autovacuum first
/// analyzes it (`docs/postgres-facts.md#plans-made-on-a-young-table`). `ANALYZE` also makes
/// every connection plan its statements again. It blocks for a second or two, while the
/// stack is being set up and nothing is measured.
fn prime_records(cluster: &PgCluster) {
    cluster.psql(&format!(
        "INSERT INTO keyflight_records
             (scope, state, fingerprint, claim_id, fence, created_at, retention,
              expires_at, response_status, response_headers, response_body, updated_at)
         SELECT sha256(('bench-primed-' || i)::bytea), 'completed',
                sha256(('bench-primed-' || i)::bytea), gen_random_uuid(),
                nextval('keyflight_fence_seq'), now(), interval '1 day',
                now() + interval '1 day', 201, '[]', '\\x7b7d', now()
           FROM generate_series(1, {PRIMED_RECORDS}) AS i"
    ));
    cluster.psql("VACUUM ANALYZE keyflight_records");
}
