//! The stack under test: durable Postgres, lease-store, demo upstream, and two Envoys.
//!
//! Built from the same parts as the e2e harness ([`keyflight_e2e::binaries::Binaries`] finds
//! the programs, honouring `KEYFLIGHT_*_BIN`, `KEYFLIGHT_WASM` and `KEYFLIGHT_ENVOY`;
//! [`keyflight_e2e::envoy_config`] renders the shipped Envoy config) but not the e2e
//! `Stack` itself, which runs a fast, non-durable Postgres and one Envoy. Here Postgres
//! keeps its production durability (`fsync` and `synchronous_commit` on: [`PgOptions`]
//! durable), and two Envoys run side by side: guarded (the keyflight filter) and plain
//! (no filter, plus a `direct_response` route), see [`crate::envoy`].
//!
//! Both Envoys run `--concurrency 2`: one worker per core of the 2-core machine this was
//! built on, as `scripts/up.sh` and the e2e harness run it. Equal worker counts are what
//! makes guarded vs plain a fair comparison; fewer workers than cores would cap both sides
//! at one core and hide the filter's CPU cost behind idle capacity. `--log-level warn` on
//! both: Envoy's info logging is not what is measured.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use keyflight_e2e::binaries::Binaries;
use keyflight_e2e::envoy_config::{self, Ports};
use keyflight_testkit::pg::{PgCluster, PgOptions};
use keyflight_testkit::process::{ChildGuard, free_port, wait_http_ok};
use serde_json::Value;

use crate::envoy;
use crate::error::BenchError;
use crate::procfs::{self, Watched};

/// How long a service may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Envoy worker threads, the same on both sides.
pub const ENVOY_WORKERS: u32 = 2;

/// The lease-store's admin token in the bench stack.
const ADMIN_TOKEN: &str = "bench-admin-token";

/// A running Envoy and its ports.
pub struct Envoy {
    child: ChildGuard,
    /// Its listener and admin ports.
    pub ports: Ports,
}

impl Envoy {
    /// Envoy's process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// `http://127.0.0.1:LISTENER{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.listener)
    }
}

/// The running stack. Fields drop in order: Envoys first, Postgres last.
pub struct BenchStack {
    /// The plain Envoy, once [`BenchStack::start_plain_envoy`] ran.
    pub plain: Option<Envoy>,
    /// The Envoy with the keyflight filter.
    pub guarded: Envoy,
    upstream: ChildGuard,
    /// A second lease-store with other settings, and its port
    /// ([`BenchStack::start_variant_store`]).
    variant_store: Option<(ChildGuard, u16)>,
    lease_store: ChildGuard,
    postgres: PgCluster,
    binaries: Binaries,
    /// The plugin JSON the guarded Envoy runs (the shipped demo policy).
    pub plugin: Value,
    ports: Ports,
    config_dir: PathBuf,
}

impl BenchStack {
    /// Starts Postgres (durable), lease-store, upstream and the guarded Envoy; Envoy
    /// configs are written under `config_dir`.
    pub async fn start(config_dir: &Path) -> Result<BenchStack, BenchError> {
        let binaries = Binaries::locate();
        let yaml = envoy_config::shipped_demo_yaml();
        let plugin = envoy_config::shipped_plugin_config(&yaml)
            .map_err(|e| BenchError::Input(e.to_string()))?;
        let ports = Ports {
            listener: free_port(),
            admin: free_port(),
            lease_stores: vec![free_port()],
            upstream: free_port(),
        };
        std::fs::create_dir_all(config_dir)
            .map_err(BenchError::io(format!("create {}", config_dir.display())))?;
        let wasm = binaries.wasm.display().to_string();
        let guarded_yaml = envoy_config::render(&yaml, &ports, &wasm, &plugin)
            .map_err(|e| BenchError::Input(e.to_string()))?;
        let guarded_path = config_dir.join("envoy-guarded.yaml");
        std::fs::write(&guarded_path, guarded_yaml)
            .map_err(BenchError::io(format!("write {}", guarded_path.display())))?;

        let postgres = tokio::task::spawn_blocking(|| {
            PgCluster::start_with(PgOptions {
                durable: true,
                ..PgOptions::default()
            })
        });
        let mut guarded = spawn_envoy(&binaries, &guarded_path);
        let mut upstream = {
            let mut command = Command::new(&binaries.upstream);
            command.args(["--listen", &format!("127.0.0.1:{}", ports.upstream)]);
            ChildGuard::spawn("bench-upstream", command)
        };
        let postgres = postgres
            .await
            .map_err(|e| BenchError::Answer(format!("starting Postgres failed: {e}")))?;
        let token = plugin["lease_store"]["token"]
            .as_str()
            .ok_or_else(|| BenchError::Input("the shipped plugin JSON has no token".into()))?;
        let mut lease_store = {
            let mut command = lease_store_command(&binaries, &postgres, ports.lease_store(), token);
            command.arg("--migrate");
            ChildGuard::spawn("bench-lease-store", command)
        };
        let store_ready = format!("http://127.0.0.1:{}/readyz", ports.lease_store());
        wait_http_ok(&store_ready, READY_TIMEOUT, Some(&mut lease_store)).await;
        let upstream_ready = format!("http://127.0.0.1:{}/stats", ports.upstream);
        wait_http_ok(&upstream_ready, READY_TIMEOUT, Some(&mut upstream)).await;
        let envoy_ready = format!("http://127.0.0.1:{}/ready", ports.admin);
        wait_http_ok(&envoy_ready, READY_TIMEOUT, Some(&mut guarded)).await;
        Ok(BenchStack {
            plain: None,
            guarded: Envoy {
                child: guarded,
                ports: ports.clone(),
            },
            upstream,
            variant_store: None,
            lease_store,
            postgres,
            binaries,
            plugin,
            ports,
            config_dir: config_dir.to_path_buf(),
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
    ) -> Result<Envoy, BenchError> {
        self.start_direct_envoy("filter-floor", true, status, body)
            .await
    }

    /// Renders, writes and starts an Envoy (`envoy-{name}.yaml`) with the `direct_response`
    /// route, with or without the keyflight filter, and waits until it is ready.
    async fn start_direct_envoy(
        &self,
        name: &str,
        with_filter: bool,
        status: u16,
        body: &str,
    ) -> Result<Envoy, BenchError> {
        let ports = Ports {
            listener: free_port(),
            admin: free_port(),
            ..self.ports.clone()
        };
        let wasm = self.binaries.wasm.display().to_string();
        let yaml = envoy_config::render(
            &envoy_config::shipped_demo_yaml(),
            &ports,
            &wasm,
            &self.plugin,
        )
        .map_err(|e| BenchError::Input(e.to_string()))?;
        let yaml = if with_filter {
            yaml
        } else {
            envoy::without_filter(&yaml)?
        };
        let yaml = envoy::with_direct_response(&yaml, status, body)?;
        let path = self.config_dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&path, yaml).map_err(BenchError::io(format!("write {}", path.display())))?;
        let mut child = spawn_envoy(&self.binaries, &path);
        let ready = format!("http://127.0.0.1:{}/ready", ports.admin);
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut child)).await;
        Ok(Envoy { child, ports })
    }

    /// Starts a second lease-store on the same database, with `env` on top of the first
    /// one's environment (an A/B of store settings in one run), and waits until it is ready.
    pub async fn start_variant_store(
        &mut self,
        env: &[(String, String)],
    ) -> Result<(), BenchError> {
        let port = free_port();
        let token = self.filter_token();
        let mut command = lease_store_command(&self.binaries, &self.postgres, port, &token);
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = ChildGuard::spawn("bench-lease-store-variant", command);
        let ready = format!("http://127.0.0.1:{port}/readyz");
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut child)).await;
        self.variant_store = Some((child, port));
        Ok(())
    }

    /// The second lease-store's `host:port` and process id, once started.
    pub fn variant_store(&self) -> Option<(String, u32)> {
        self.variant_store
            .as_ref()
            .map(|(child, port)| (format!("127.0.0.1:{port}"), child.pid()))
    }

    /// Starts another guarded Envoy, with the shipped plugin, whose lease-store is the
    /// second one ([`BenchStack::start_variant_store`]).
    pub async fn start_guarded_on_variant_store(&self, name: &str) -> Result<Envoy, BenchError> {
        let (_, port) = self
            .variant_store
            .as_ref()
            .ok_or_else(|| BenchError::Input("no second lease-store was started".into()))?;
        let ports = Ports {
            listener: free_port(),
            admin: free_port(),
            lease_stores: vec![*port],
            ..self.ports.clone()
        };
        self.start_guarded(name, |_| {}, ports).await
    }

    /// Starts another guarded Envoy whose plugin JSON is the shipped one changed by `edit`
    /// (e.g. the edge cache off). An Envoy that refuses the plugin is an error, not a panic:
    /// the filter build under test may not know the field.
    pub async fn start_guarded_variant(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Envoy, BenchError> {
        let ports = Ports {
            listener: free_port(),
            admin: free_port(),
            ..self.ports.clone()
        };
        self.start_guarded(name, edit, ports).await
    }

    async fn start_guarded(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Value),
        ports: Ports,
    ) -> Result<Envoy, BenchError> {
        let mut plugin = self.plugin.clone();
        edit(&mut plugin);
        let wasm = self.binaries.wasm.display().to_string();
        let yaml = envoy_config::render(&envoy_config::shipped_demo_yaml(), &ports, &wasm, &plugin)
            .map_err(|e| BenchError::Input(e.to_string()))?;
        let path = self.config_dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&path, yaml).map_err(BenchError::io(format!("write {}", path.display())))?;
        let mut child = spawn_envoy(&self.binaries, &path);
        let ready = format!("127.0.0.1:{}", ports.admin);
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait() {
                return Err(BenchError::Answer(format!(
                    "Envoy {name} exited ({status}):\n{}",
                    child.log_tail()
                )));
            }
            if let Ok(mut connection) = crate::http::Connection::open(&ready).await
                && let Ok(answer) = connection
                    .send(hyper::Method::GET, "/ready", &[], bytes::Bytes::new())
                    .await
                && answer.status.is_success()
            {
                return Ok(Envoy { child, ports });
            }
            if std::time::Instant::now() > deadline {
                return Err(BenchError::Answer(format!("Envoy {name} is not ready")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The plain Envoy; an error before [`BenchStack::start_plain_envoy`].
    pub fn plain(&self) -> Result<&Envoy, BenchError> {
        self.plain
            .as_ref()
            .ok_or_else(|| BenchError::Input("the plain Envoy has not been started".into()))
    }

    /// The lease-store's `host:port`.
    pub fn store_authority(&self) -> String {
        format!("127.0.0.1:{}", self.ports.lease_store())
    }

    /// The upstream's `host:port`.
    pub fn upstream_authority(&self) -> String {
        format!("127.0.0.1:{}", self.ports.upstream)
    }

    /// The filter's bearer token (what the lease-store accepts on `/v1/claims`).
    pub fn filter_token(&self) -> String {
        self.plugin["lease_store"]["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Postgres' TCP port.
    pub fn postgres_port(&self) -> u16 {
        self.postgres.port()
    }

    /// The lease-store's process id.
    pub fn lease_store_pid(&self) -> u32 {
        self.lease_store.pid()
    }

    /// The upstream's process id.
    pub fn upstream_pid(&self) -> u32 {
        self.upstream.pid()
    }

    /// Postgres as a process tree (postmaster and backends), when it can be found.
    pub fn postgres_watch(&self) -> Option<Watched> {
        procfs::postmaster(self.postgres.port()).map(Watched::Tree)
    }

    /// The filter's `.wasm` file.
    pub fn wasm_path(&self) -> &Path {
        &self.binaries.wasm
    }

    /// The guarded Envoy's admin `/stats` filtered to `stat` (a regex).
    pub fn guarded_stats_url(&self, stat: &str) -> String {
        format!(
            "http://127.0.0.1:{}/stats?filter={stat}",
            self.guarded.ports.admin
        )
    }
}

/// `lease-store serve` on `port` against the bench database, with the shipped tokens.
fn lease_store_command(
    binaries: &Binaries,
    postgres: &PgCluster,
    port: u16,
    token: &str,
) -> Command {
    let mut command = Command::new(&binaries.lease_store);
    command
        .arg("serve")
        .env("KEYFLIGHT_DATABASE_URL", postgres.url())
        .env("KEYFLIGHT_LISTEN", format!("127.0.0.1:{port}"))
        .env("KEYFLIGHT_TOKEN", token)
        .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN_TOKEN);
    command
}

fn spawn_envoy(binaries: &Binaries, config: &Path) -> ChildGuard {
    let mut command = Command::new(&binaries.envoy);
    command.arg("-c").arg(config).args([
        "--disable-hot-restart",
        "--concurrency",
        &ENVOY_WORKERS.to_string(),
        "--log-level",
        "warn",
    ]);
    ChildGuard::spawn("bench-envoy", command)
}
