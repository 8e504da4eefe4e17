//! How each part of a stack is started: the commands for Envoy, the lease-store and the
//! demo upstream, and [`Part`], a service that can be killed and started again on the same
//! port with one log continued across restarts.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::binaries::Binaries;
use crate::envoy_config::Ports;
use crate::process::{ChildGuard, Signal};

/// The lease-store's admin token in every stack this launcher starts (test and demo value).
pub const ADMIN_TOKEN: &str = "demo-admin-token";

/// keyflight's bearer token for the service's reconcile endpoint in every stack (test and
/// demo value): every Envoy has it as `KEYFLIGHT_RECONCILE_TOKEN`, which the shipped configs
/// pass to the filter's VM, and an upstream that keeps its effects requires it
/// (`docs/reconcile.md#who-may-ask`).
pub const RECONCILE_TOKEN: &str = "demo-reconcile-token";

/// One service of the stack. Its log lives at a fixed path, so a restarted process
/// continues it and a reader (the chaos judge, a person) finds one file per part.
pub(super) struct Part {
    name: String,
    log: PathBuf,
    child: Option<ChildGuard>,
    /// The previous process of an Envoy's hot restart, draining until the new one tells
    /// it to exit ([`Part::hot_restart`]).
    parent: Option<ChildGuard>,
}

impl Part {
    pub(super) fn new(name: &str, logs: &Path) -> Part {
        Part {
            name: name.to_owned(),
            log: logs.join(format!("{name}.log")),
            child: None,
            parent: None,
        }
    }

    /// Starts `command` (after killing a process still running).
    pub(super) fn spawn(&mut self, command: Command) {
        self.kill();
        self.child = Some(ChildGuard::spawn_logged(&self.name, command, &self.log));
    }

    /// Starts `command`, the next epoch of a hot restart, beside the running process,
    /// which becomes the parent: it keeps running until the new process tells it to exit.
    /// Its log continues the same file.
    pub(super) fn hot_restart(&mut self, command: Command) {
        if let Some(mut earlier) = self.parent.take() {
            earlier.kill();
        }
        self.parent = self.child.take();
        self.child = Some(ChildGuard::spawn_logged(&self.name, command, &self.log));
    }

    /// Waits up to `timeout` for the parent of the last hot restart to exit (panicking with
    /// its log if it does not); nothing when there is none.
    pub(super) fn wait_parent_exit(&mut self, timeout: std::time::Duration) {
        if let Some(mut parent) = self.parent.take() {
            parent.wait_exit(timeout);
        }
    }

    /// The parent's process id while a hot restart's parent has not been reaped.
    pub(super) fn parent_pid(&self) -> Option<u32> {
        self.parent.as_ref().map(ChildGuard::pid)
    }

    /// `SIGKILL`, and reaps it (and a hot restart's parent); nothing when it is not running.
    pub(super) fn kill(&mut self) {
        for mut child in [self.child.take(), self.parent.take()]
            .into_iter()
            .flatten()
        {
            child.kill();
        }
    }

    /// Sends `signal`; panics when the part is not running (a harness bug).
    pub(super) fn signal(&self, signal: Signal) {
        match &self.child {
            Some(child) => child.signal(signal),
            None => panic!("{} is not running", self.name),
        }
    }

    /// `SIGTERM`, and waits up to `timeout` for it to exit (panicking with its log if it
    /// does not): a pod terminated by a rollout. Nothing when it is not running.
    pub(super) fn terminate(&mut self, timeout: std::time::Duration) {
        for mut child in [self.child.take(), self.parent.take()]
            .into_iter()
            .flatten()
        {
            if child.try_wait().is_none() {
                child.signal(Signal::Term);
            }
            child.wait_exit(timeout);
        }
    }

    pub(super) fn child_mut(&mut self) -> Option<&mut ChildGuard> {
        self.child.as_mut()
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ChildGuard::pid)
    }

    pub(super) fn log(&self) -> &Path {
        &self.log
    }

    /// The last lines of its log, for failure messages.
    pub(super) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// Where a part runs: its address, and its network namespace in the stack's
/// [`crate::net::NetLab`] (`None`: the host's, on `127.0.0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) ip: IpAddr,
    pub(super) netns: Option<usize>,
}

impl Place {
    /// The host's loopback, as the default stack runs every part.
    pub(super) const LOOPBACK: Place = Place {
        ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        netns: None,
    };
}

/// One Envoy: where it runs, its ports, its rendered config and the process.
pub(super) struct Envoy {
    /// Where its epoch-0 process writes the `--base-id` it picked, which a hot restart
    /// passes on ([`Restart`]).
    pub(super) base_id_file: PathBuf,
    /// The restart epoch of its running process (0 unless it was hot restarted).
    pub(super) epoch: u32,
    pub(super) place: Place,
    /// The Envoy binary and `.wasm` it runs (the stack's unless a test gave others).
    pub(super) binaries: Binaries,
    pub(super) ports: Ports,
    pub(super) config: PathBuf,
    pub(super) part: Part,
}

/// The store's inbound sidecar (an Envoy terminating the workloads' mutual TLS).
pub(super) struct Sidecar {
    /// Its mTLS listener, which the filter Envoys call.
    pub(super) port: u16,
    pub(super) admin: u16,
    pub(super) part: Part,
}

/// One lease-store replica.
pub(super) struct Store {
    pub(super) place: Place,
    /// The lease-store binary it runs.
    pub(super) binaries: Binaries,
    pub(super) port: u16,
    /// Its admin listener's port (`/v1/records…`, the console), apart from the data plane;
    /// `admin` in `stack.json`.
    pub(super) admin: u16,
    pub(super) part: Part,
}

/// The command that runs Envoy on the rendered `config`, as every stack runs it, with the
/// lease-store token in its environment (`KEYFLIGHT_STORE_TOKEN`, which the shipped configs
/// pass to the filter's VM: `docs/configuration.md#caller-identity`).
///
/// `--disable-hot-restart`: hot restart is what needs a shared-memory region per
/// `--base-id`, so without it any number of Envoys coexist with no id to hand out. The
/// stack's own filter Envoys run [`restartable_envoy_command`] instead.
pub fn envoy_command(
    binaries: &Binaries,
    config: &Path,
    log_level: &str,
    store_token: &str,
) -> Command {
    let mut command = envoy_base_command(binaries, config, log_level, store_token);
    command.arg("--disable-hot-restart");
    command
}

/// How an Envoy process takes part in hot restart
/// (`docs/envoy-facts.md#hot-restart`).
pub(super) enum Restart<'a> {
    /// A fresh process (epoch 0): Envoy picks a `--base-id` no other Envoy on the machine
    /// uses (its shared memory and domain sockets are named by it) and writes it to the file.
    First { base_id_file: &'a Path },
    /// Epoch `epoch` of `base_id`: it takes the running process's listen sockets, which
    /// drains, and tells it to exit `parent_shutdown` after it started. Its log lines carry
    /// `epoch=N` before the message, so a reader tells its lines from its parent's.
    Next {
        base_id: u32,
        epoch: u32,
        parent_shutdown: std::time::Duration,
    },
}

/// [`envoy_command`] for a stack's filter Envoy, which can be hot restarted.
pub(super) fn restartable_envoy_command(
    binaries: &Binaries,
    config: &Path,
    log_level: &str,
    store_token: &str,
    restart: Restart,
) -> Command {
    let mut command = envoy_base_command(binaries, config, log_level, store_token);
    match restart {
        Restart::First { base_id_file } => {
            command
                .args(["--use-dynamic-base-id", "--restart-epoch", "0"])
                .arg("--base-id-path")
                .arg(base_id_file);
        }
        Restart::Next {
            base_id,
            epoch,
            parent_shutdown,
        } => {
            command.args([
                "--base-id".to_owned(),
                base_id.to_string(),
                "--restart-epoch".to_owned(),
                epoch.to_string(),
                "--parent-shutdown-time-s".to_owned(),
                parent_shutdown.as_secs().max(1).to_string(),
                // Envoy's default format with the epoch before the message.
                "--log-format".to_owned(),
                format!("[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] epoch={epoch} %v"),
            ]);
        }
    }
    command
}

/// Removes the shared-memory region Envoy's hot restart left for the base id in
/// `base_id_file` (Envoy leaves it behind even on a clean exit); for a process that is
/// gone. Best effort: a leftover region only takes one id out of the dynamic pool.
pub(super) fn remove_hot_restart_memory(base_id_file: &Path) {
    if let Ok(text) = std::fs::read_to_string(base_id_file)
        && let Ok(base_id) = text.trim().parse::<u64>()
    {
        // Envoy names the region by `base_id * 10` (room for its per-epoch sockets).
        let _ = std::fs::remove_file(format!("/dev/shm/envoy_shared_memory_{}", base_id * 10));
    }
}

fn envoy_base_command(
    binaries: &Binaries,
    config: &Path,
    log_level: &str,
    store_token: &str,
) -> Command {
    let mut command = Command::new(&binaries.envoy);
    command.env("KEYFLIGHT_STORE_TOKEN", store_token);
    command.env("KEYFLIGHT_RECONCILE_TOKEN", RECONCILE_TOKEN);
    // Where the native adapter's config finds its module (`envoy/native-demo.yaml`).
    command.env(
        "ENVOY_DYNAMIC_MODULES_SEARCH_PATH",
        crate::binaries::native_module_dir(),
    );
    // Envoy logs its local time: in UTC its lines read like every other part's.
    command.env("TZ", "UTC");
    command.arg("-c").arg(config).args([
        "--concurrency",
        "2",
        "--log-level",
        log_level,
        // A listener replaced by a new configuration is drained for this long, then
        // closed and its plugin retired.
        "--drain-time-s",
        "1",
        "--drain-strategy",
        "immediate",
    ]);
    command
}

/// The command that runs the demo upstream on `127.0.0.1:port`.
pub fn upstream_command(binaries: &Binaries, port: u16) -> Command {
    upstream_command_at(binaries, SocketAddr::new(Place::LOOPBACK.ip, port), None)
}

/// The command that runs the demo upstream on `address`, keeping its payments in
/// the database `effects` names when given ([`super::StackOptions::upstream_effects`]); its
/// reconcile endpoint then requires [`RECONCILE_TOKEN`], read from a file in the directory
/// `effects` names.
pub(super) fn upstream_command_at(
    binaries: &Binaries,
    address: SocketAddr,
    effects: Option<(&str, &Path)>,
) -> Command {
    let mut command = Command::new(&binaries.upstream);
    command.args(["--listen", &address.to_string()]);
    if let Some((url, dir)) = effects {
        let token_file = dir.join("reconcile-token");
        std::fs::write(&token_file, RECONCILE_TOKEN)
            .unwrap_or_else(|e| panic!("writing {}: {e}", token_file.display()));
        command.args(["--effects-database-url", url]);
        command.arg("--reconcile-token-file").arg(token_file);
    }
    command
}

/// The command that runs a lease-store on `127.0.0.1:port` over `database_url`, accepting
/// the filter's `token`, with its admin API (and [`ADMIN_TOKEN`]) on `127.0.0.1:admin_port`;
/// `migrate` applies the migrations first. The stack's Postgres offers no TLS, so cleartext
/// is allowed; by the variable, which a previous release's store ignores.
pub fn lease_store_command(
    binaries: &Binaries,
    database_url: &str,
    (port, admin_port): (u16, u16),
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
        .env("KEYFLIGHT_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
        .env("KEYFLIGHT_TOKEN", token)
        .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE", "true");
    command
}
