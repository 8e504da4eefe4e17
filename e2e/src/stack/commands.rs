//! How each part is started: the rendered Envoy config and the commands for
//! Envoy, the demo upstream and the lease-store (public, so other harnesses —
//! `keyflight-chaos` — run the parts exactly as the tests do), and Envoy on
//! its own for configuration checks.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use keyflight_testkit::process::{ChildGuard, free_port};
use serde_json::Value;

use super::{ADMIN_TOKEN, Database, POLL_INTERVAL, READY_TIMEOUT, StackOptions, http_client};
use crate::binaries::Binaries;
use crate::envoy_config::{self, Ports};
use crate::lds;

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

/// Renders the shipped config for these ports and options into a fresh temp file:
/// `envoy/demo.yaml` for one lease-store, `envoy/two-replicas.yaml` for two. Only replica
/// 0's listener (`first`) is served from a file when the stack is reconfigurable.
pub(super) fn write_envoy_config(
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
pub(super) fn render_for(binaries: &Binaries, ports: &Ports, options: &StackOptions) -> String {
    let wasm = binaries.wasm.display().to_string();
    let mut rendered = envoy_config::render_shipped(ports, &wasm, &options.plugin)
        .unwrap_or_else(|e| panic!("{e}"));
    for edit in &options.envoy_edits {
        rendered = edit.apply(&rendered).unwrap_or_else(|e| panic!("{e}"));
    }
    rendered
}

/// Where the listener of the bootstrap at `config` lives when it is served from a file.
pub(super) fn lds_path_of(config: &std::path::Path) -> PathBuf {
    config.with_extension("lds.json")
}

pub(super) fn spawn_envoy(binaries: &Binaries, config: &std::path::Path) -> ChildGuard {
    ChildGuard::spawn("envoy", envoy_command(binaries, config))
}

pub(super) fn spawn_upstream(binaries: &Binaries, port: u16) -> ChildGuard {
    ChildGuard::spawn("demo-upstream", upstream_command(binaries, port))
}

/// Starts a lease-store on `port` over `postgres` with the stack's extra environment;
/// `migrate` applies the migrations first (one replica does; the other starts once they
/// are in).
pub(super) fn spawn_lease_store(
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
