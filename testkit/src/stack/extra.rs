//! Envoys and lease-stores beside a stack's own: a benchmark's plain Envoy and its A/B
//! variants, and Envoy alone with a plugin configuration to see whether it is accepted.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{READY_TIMEOUT, Stack, StackOptions, envoy_command, lease_store_command};
use crate::binaries::Binaries;
use crate::envoy_config::{self, Ports};
use crate::process::{ChildGuard, free_port, wait_http_ok};

/// How often start-up is checked.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// An Envoy started beside the stack ([`Stack::start_extra_envoy`]); stopped when dropped.
pub struct ExtraEnvoy {
    child: ChildGuard,
    /// Its ports.
    pub ports: Ports,
}

impl ExtraEnvoy {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// `http://127.0.0.1:LISTENER{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.listener)
    }
}

/// A lease-store started beside the stack's on the same database
/// ([`Stack::start_extra_store`]); stopped when dropped.
pub struct ExtraStore {
    child: ChildGuard,
    /// Its port.
    pub port: u16,
}

impl ExtraStore {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
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

impl Stack {
    /// Fresh listener and admin ports reaching this stack's lease-stores and upstream.
    pub fn fresh_envoy_ports(&self) -> Ports {
        Ports {
            listener: free_port(),
            admin: free_port(),
            ..self.envoy_ports(0).clone()
        }
    }

    /// The shipped demo config rendered for `ports` with `plugin` (no further edits): the
    /// starting point of an extra Envoy's config.
    pub fn render_demo_envoy(&self, ports: &Ports, plugin: &Value) -> String {
        let wasm = self.binaries.wasm.display().to_string();
        envoy_config::render(&envoy_config::shipped_demo_yaml(), ports, &wasm, plugin)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Writes `yaml` to `envoy-{name}.yaml` in the stack's directory and starts an Envoy on
    /// it; waits until it is ready. An Envoy that exits during start-up (e.g. it refuses
    /// the plugin) is an error with its log, not a panic.
    pub async fn start_extra_envoy(
        &self,
        name: &str,
        yaml: &str,
        ports: Ports,
    ) -> Result<ExtraEnvoy, String> {
        self.start_extra_envoy_logging(name, yaml, ports, &self.options.envoy_log_level)
            .await
    }

    /// [`Stack::start_extra_envoy`] at Envoy's `--log-level` `log_level`.
    pub async fn start_extra_envoy_logging(
        &self,
        name: &str,
        yaml: &str,
        ports: Ports,
        log_level: &str,
    ) -> Result<ExtraEnvoy, String> {
        assert!(
            self.net.is_none(),
            "an extra Envoy runs on the host side, which cannot reach the lease-stores of a \
             stack with its own networks"
        );
        let path = self.dir.join(format!("envoy-{name}.yaml"));
        std::fs::write(&path, yaml).map_err(|e| format!("write {}: {e}", path.display()))?;
        let command = envoy_command(
            &self.binaries,
            &path,
            log_level,
            &self.options.filter_token(),
        );
        let mut child = ChildGuard::spawn(&format!("envoy-{name}"), command);
        match wait_envoy_ready(&mut child, ports.admin).await {
            Ok(()) => Ok(ExtraEnvoy { child, ports }),
            Err(status) => Err(format!(
                "Envoy {name} exited during start-up ({status}):\n{}",
                child.log_tail()
            )),
        }
    }

    /// Starts a lease-store on a free port over this stack's database, with `env` on top
    /// of the stack's store environment (an A/B of store settings in one run); waits until
    /// it is ready.
    pub async fn start_extra_store(&self, name: &str, env: &[(String, String)]) -> ExtraStore {
        let port = free_port();
        let token = self.options.filter_token();
        let mut command = lease_store_command(
            &self.binaries,
            &self.database.url(),
            (port, free_port()),
            &token,
            false,
        );
        command.envs(self.options.store_env.iter().map(|(k, v)| (k, v)));
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = ChildGuard::spawn(&format!("lease-store-{name}"), command);
        let ready = format!("http://127.0.0.1:{port}/readyz");
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut child)).await;
        ExtraStore { child, port }
    }
}

/// Starts Envoy with `plugin` and no lease-store or upstream behind it, to see whether the
/// plugin configuration is accepted: tests of configuration errors need nothing else.
pub async fn envoy_alone(plugin: &Value) -> EnvoyStart {
    envoy_alone_as(StackOptions {
        plugin: plugin.clone(),
        ..StackOptions::default()
    })
    .await
}

/// [`envoy_alone`] with the adapter and plugin of `options`.
pub async fn envoy_alone_as(options: StackOptions) -> EnvoyStart {
    let binaries = Binaries::locate();
    let ports = Ports {
        listener: free_port(),
        admin: free_port(),
        lease_stores: vec![free_port()],
        upstream: free_port(),
    };
    let path = std::env::temp_dir().join(format!(
        "keyflight-envoy-alone-{}-{}.yaml",
        std::process::id(),
        ports.admin
    ));
    let sites = super::Sites {
        envoys: vec![super::Place::LOOPBACK],
        stores: vec![super::Place::LOOPBACK],
        host_side: super::Place::LOOPBACK.ip,
    };
    let rendered = super::render_envoy_config(&binaries, &options, 0, &ports, &sites);
    std::fs::write(&path, rendered).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let mut envoy = ChildGuard::spawn(
        "envoy",
        envoy_command(&binaries, &path, "info", &options.filter_token()),
    );
    let outcome = match wait_envoy_ready(&mut envoy, ports.admin).await {
        Ok(()) => EnvoyStart::Ready { log: envoy.log() },
        Err(status) => EnvoyStart::Exited {
            status,
            log: envoy.log(),
        },
    };
    let _ = std::fs::remove_file(&path);
    outcome
}

/// Waits until the Envoy answers `/ready` on `admin`, or returns how it exited.
async fn wait_envoy_ready(
    child: &mut ChildGuard,
    admin: u16,
) -> Result<(), std::process::ExitStatus> {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{admin}/ready");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait() {
            return Err(status);
        }
        if let Ok(response) = client.get(&url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        assert!(
            Instant::now() < deadline,
            "Envoy neither exited nor became ready within {READY_TIMEOUT:?}; log tail:\n{}",
            child.log_tail()
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
