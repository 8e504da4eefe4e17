//! The two-replica stack a chaos run breaks: one Postgres, two lease-stores, one demo
//! upstream, two Envoys, every Envoy reaching both lease-stores (`envoy/two-replicas.yaml`,
//! rendered as the end-to-end tests render it), all on free ports.
//!
//! The parts run exactly as the end-to-end tests run them (the commands come from
//! `keyflight_e2e::stack`), with two differences a fault-injection run needs: each part can
//! be killed, frozen and started again on the same port, and every part's log goes to one
//! file per part under the run's directory (`logs/`), continued across restarts and kept
//! after the run. Each Envoy's config adds `x-keyflight-via: envoy-N` to the requests it
//! forwards, so the upstream's execution log says which Envoy dispatched each execution.
//!
//! Setting up and healing panics when a part does not come back within [`READY_TIMEOUT`]:
//! a run whose stack cannot be repaired has nothing left to check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use keyflight_e2e::binaries::Binaries;
use keyflight_e2e::envoy_config::{self, Ports};
use keyflight_e2e::envoy_variants::EnvoyEdit;
use keyflight_e2e::stack::{envoy_command, lease_store_command, upstream_command};
use keyflight_testkit::database::Database;
use keyflight_testkit::ha::{HaCluster, HaOptions};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::{ChildGuard, Signal, free_port, wait_http_ok};
use serde_json::Value;

/// How long a part may take to answer its readiness probe.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The header each Envoy adds to what it forwards (the demo upstream logs it; see
/// `demo-upstream/src/executions.rs`).
pub const VIA_HEADER: &str = "x-keyflight-via";

/// The value of [`VIA_HEADER`] for Envoy `index`.
pub fn via_value(index: usize) -> String {
    format!("envoy-{index}")
}

/// Where the workload reaches the stack: copied out, so it never borrows the stack the
/// fault runner is changing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Each Envoy's listener port.
    pub listeners: Vec<u16>,
    /// The demo upstream's port.
    pub upstream: u16,
}

/// One lease-store replica.
struct Store {
    port: u16,
    child: Option<ChildGuard>,
    log: PathBuf,
}

/// One Envoy.
struct Envoy {
    ports: Ports,
    config: PathBuf,
    child: Option<ChildGuard>,
    log: PathBuf,
}

/// How long a replicated Postgres may take to fail over or to get its standby back.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// The running stack. Fields drop in declaration order: Envoys first, Postgres last.
pub struct ChaosStack {
    envoys: Vec<Envoy>,
    upstream: ChildGuard,
    upstream_port: u16,
    stores: Vec<Store>,
    postgres: Database,
    binaries: Binaries,
    token: String,
}

impl ChaosStack {
    /// Starts every part under `dir` (logs in `dir/logs`, Envoy configs in `dir`) with the
    /// plugin configuration `plugin`, and waits until each answers its readiness probe.
    pub async fn start(
        dir: &Path,
        plugin: &Value,
        replicas: usize,
        replicated_postgres: bool,
    ) -> ChaosStack {
        let binaries = Binaries::locate();
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("create {}: {e}", logs.display()));
        let token = plugin["lease_store"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("the plugin configuration has no lease_store.token"))
            .to_owned();
        let store_ports: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
        let upstream_port = free_port();

        let mut envoys: Vec<Envoy> = (0..replicas)
            .map(|index| {
                let ports = Ports {
                    listener: free_port(),
                    admin: free_port(),
                    lease_stores: store_ports.clone(),
                    upstream: upstream_port,
                };
                let config = dir.join(format!("envoy-{index}.yaml"));
                write_envoy_config(&binaries, &ports, plugin, index, &config);
                Envoy {
                    ports,
                    config,
                    child: None,
                    log: logs.join(format!("envoy-{index}.log")),
                }
            })
            .collect();
        for envoy in &mut envoys {
            envoy.child = Some(spawn_envoy(&binaries, envoy));
        }
        let mut upstream = ChildGuard::spawn_logged(
            "demo-upstream",
            upstream_command(&binaries, upstream_port),
            &logs.join("demo-upstream.log"),
        );

        let postgres = if replicated_postgres {
            Database::Replicated(Box::new(HaCluster::start(HaOptions::default()).await))
        } else {
            Database::Single(
                tokio::task::spawn_blocking(PgCluster::start)
                    .await
                    .unwrap_or_else(|e| panic!("starting Postgres failed: {e}")),
            )
        };
        let upstream_ready = format!("http://127.0.0.1:{upstream_port}/stats");
        wait_http_ok(&upstream_ready, READY_TIMEOUT, Some(&mut upstream)).await;
        let mut stack = ChaosStack {
            envoys,
            upstream,
            upstream_port,
            stores: store_ports
                .iter()
                .enumerate()
                .map(|(index, &port)| Store {
                    port,
                    child: None,
                    log: logs.join(format!("lease-store-{index}.log")),
                })
                .collect(),
            postgres,
            binaries,
            token,
        };
        // One replica migrates; the others start once the schema is in.
        for index in 0..replicas {
            stack.start_store_with(index, index == 0).await;
        }
        for index in 0..replicas {
            stack.wait_envoy(index).await;
        }
        stack
    }

    /// Where the workload sends its requests.
    pub fn endpoints(&self) -> Endpoints {
        Endpoints {
            listeners: self.envoys.iter().map(|e| e.ports.listener).collect(),
            upstream: self.upstream_port,
        }
    }

    /// Kills lease-store `index` (SIGKILL) and reaps it.
    pub fn kill_store(&mut self, index: usize) {
        if let Some(mut child) = self.stores[index].child.take() {
            child.kill();
        }
    }

    /// Starts lease-store `index` again on its port and waits until it is ready.
    pub async fn start_store(&mut self, index: usize) {
        self.start_store_with(index, false).await;
    }

    async fn start_store_with(&mut self, index: usize, migrate: bool) {
        let store = &mut self.stores[index];
        let mut command = lease_store_command(
            &self.binaries,
            &self.postgres.url(),
            store.port,
            &self.token,
            migrate,
        );
        // JSON lines: the evidence the checker reads (`checker/evidence.rs`).
        command.env("KEYFLIGHT_LOG_FORMAT", "json");
        let mut child =
            ChildGuard::spawn_logged(&format!("lease-store-{index}"), command, &store.log);
        let ready = format!("http://127.0.0.1:{}/readyz", store.port);
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut child)).await;
        store.child = Some(child);
    }

    /// Sends `signal` to lease-store `index` (`Stop` freezes it, `Cont` resumes it).
    pub fn signal_store(&self, index: usize, signal: Signal) {
        if let Some(child) = &self.stores[index].child {
            child.signal(signal);
        }
    }

    /// Crashes Postgres: `pg_ctl stop -m immediate` on a single one; on a replicated one,
    /// SIGKILL to the primary's postmaster (its Patroni agent restarts it in place). Returns
    /// what [`ChaosStack::restart_postgres`] needs to wait for.
    pub async fn crash_postgres(&self) -> Option<(usize, u32)> {
        match &self.postgres {
            Database::Single(postgres) => {
                tokio::task::block_in_place(|| postgres.stop());
                None
            }
            Database::Replicated(ha) => {
                let leader = ha.leader().await?;
                Some((leader, ha.kill_postmaster(leader)))
            }
        }
    }

    /// Brings Postgres back after [`ChaosStack::crash_postgres`] and waits until every
    /// lease-store is ready again.
    pub async fn restart_postgres(&self, crashed: Option<(usize, u32)>) {
        match (&self.postgres, crashed) {
            (Database::Single(postgres), _) => {
                tokio::task::block_in_place(|| postgres.restart());
            }
            (Database::Replicated(ha), Some((node, postmaster))) => {
                ha.wait_for_postmaster_restart(node, postmaster, FAILOVER_TIMEOUT)
                    .await;
                // Healthy again means a synchronous standby again: Patroni promotes only
                // a standby it had marked synchronous, so a primary that dies before the
                // restarted pair re-registered one would have no node it may promote.
                ha.wait_for_leader_and_sync_standby(FAILOVER_TIMEOUT).await;
            }
            (Database::Replicated(_), None) => {}
        }
        self.wait_stores_ready().await;
    }

    /// Kills the primary's node of a replicated Postgres and waits until the standby is
    /// promoted and writable; returns the old primary and the failover window. `None` on a
    /// single Postgres.
    pub async fn fail_primary_node(&self) -> Option<(usize, Duration)> {
        let Database::Replicated(ha) = &self.postgres else {
            return None;
        };
        let failover = ha.fail_primary_node(FAILOVER_TIMEOUT).await;
        Some((failover.old_leader, failover.window()))
    }

    /// Brings a dead node back as the new primary's synchronous standby (without one, a
    /// second failover would have no node Patroni may promote), then waits for the stores.
    pub async fn rejoin_node(&self, node: usize) {
        if let Database::Replicated(ha) = &self.postgres {
            ha.restart_node(node).await;
            ha.wait_for_leader_and_sync_standby(FAILOVER_TIMEOUT).await;
        }
        self.wait_stores_ready().await;
    }

    async fn wait_stores_ready(&self) {
        for store in &self.stores {
            let ready = format!("http://127.0.0.1:{}/readyz", store.port);
            wait_http_ok(&ready, READY_TIMEOUT, None).await;
        }
    }

    /// Kills Envoy `index` (SIGKILL) and reaps it.
    pub fn kill_envoy(&mut self, index: usize) {
        if let Some(mut child) = self.envoys[index].child.take() {
            child.kill();
        }
    }

    /// Starts Envoy `index` again on the same ports and waits until it is ready.
    pub async fn start_envoy(&mut self, index: usize) {
        let child = spawn_envoy(&self.binaries, &self.envoys[index]);
        self.envoys[index].child = Some(child);
        self.wait_envoy(index).await;
    }

    async fn wait_envoy(&mut self, index: usize) {
        let envoy = &mut self.envoys[index];
        let ready = format!("http://127.0.0.1:{}/ready", envoy.ports.admin);
        wait_http_ok(&ready, READY_TIMEOUT, envoy.child.as_mut()).await;
    }

    /// Waits until every part answers its readiness probe (after the last fault healed).
    pub async fn wait_healthy(&mut self) {
        let ready = format!("http://127.0.0.1:{}/stats", self.upstream_port);
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut self.upstream)).await;
        for store in &mut self.stores {
            let ready = format!("http://127.0.0.1:{}/readyz", store.port);
            wait_http_ok(&ready, READY_TIMEOUT, store.child.as_mut()).await;
        }
        for index in 0..self.envoys.len() {
            self.wait_envoy(index).await;
        }
    }

    /// Each lease-store's and each Envoy's log so far (every process of a part writes
    /// to one log), for the evidence they hold (`checker/evidence.rs`).
    pub fn logs(&self) -> (Vec<String>, Vec<String>) {
        let read = |path: &PathBuf| std::fs::read_to_string(path).unwrap_or_default();
        (
            self.stores.iter().map(|store| read(&store.log)).collect(),
            self.envoys.iter().map(|envoy| read(&envoy.log)).collect(),
        )
    }
}

/// Envoy logs its local time: in UTC, its evidence lines' times read like the stores'.
fn spawn_envoy(binaries: &Binaries, envoy: &Envoy) -> ChildGuard {
    let mut command = envoy_command(binaries, &envoy.config);
    command.env("TZ", "UTC");
    ChildGuard::spawn_logged("envoy", command, &envoy.log)
}

/// Renders the shipped two-replica config for Envoy `index` with its [`VIA_HEADER`].
fn write_envoy_config(
    binaries: &Binaries,
    ports: &Ports,
    plugin: &Value,
    index: usize,
    path: &Path,
) {
    let wasm = binaries.wasm.display().to_string();
    let rendered = envoy_config::render_shipped(ports, &wasm, plugin)
        .and_then(|yaml| {
            EnvoyEdit::AddRequestHeader {
                name: VIA_HEADER.to_owned(),
                value: via_value(index),
            }
            .apply(&yaml)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(path, rendered).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
