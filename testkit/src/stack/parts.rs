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

/// One service of the stack. Its log lives at a fixed path, so a restarted process
/// continues it and a reader (the chaos judge, a person) finds one file per part.
pub(super) struct Part {
    name: String,
    log: PathBuf,
    child: Option<ChildGuard>,
}

impl Part {
    pub(super) fn new(name: &str, logs: &Path) -> Part {
        Part {
            name: name.to_owned(),
            log: logs.join(format!("{name}.log")),
            child: None,
        }
    }

    /// Starts `command` (after killing a process still running).
    pub(super) fn spawn(&mut self, command: Command) {
        self.kill();
        self.child = Some(ChildGuard::spawn_logged(&self.name, command, &self.log));
    }

    /// `SIGKILL`, and reaps it; nothing when it is not running.
    pub(super) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
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
        if let Some(mut child) = self.child.take() {
            child.signal(Signal::Term);
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
    /// Its admin listener (`/v1/records…`), apart from the data plane.
    pub(super) admin_port: u16,
    pub(super) part: Part,
}

/// The command that runs Envoy on the rendered `config`, as every stack runs it, with the
/// lease-store token in its environment (`KEYFLIGHT_STORE_TOKEN`, which the shipped configs
/// pass to the filter's VM: `docs/configuration.md#caller-identity`).
///
/// `--disable-hot-restart`: hot restart is what needs a shared-memory region per
/// `--base-id`, so without it any number of Envoys coexist with no id to hand out.
pub fn envoy_command(
    binaries: &Binaries,
    config: &Path,
    log_level: &str,
    store_token: &str,
) -> Command {
    let mut command = Command::new(&binaries.envoy);
    command.env("KEYFLIGHT_STORE_TOKEN", store_token);
    // Envoy logs its local time: in UTC its lines read like every other part's.
    command.env("TZ", "UTC");
    command.arg("-c").arg(config).args([
        "--disable-hot-restart",
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
    upstream_command_at(binaries, SocketAddr::new(Place::LOOPBACK.ip, port))
}

/// The command that runs the demo upstream on `address`.
pub(super) fn upstream_command_at(binaries: &Binaries, address: SocketAddr) -> Command {
    let mut command = Command::new(&binaries.upstream);
    command.args(["--listen", &address.to_string()]);
    command
}

/// The command that runs a lease-store on `127.0.0.1:port` over `database_url`, accepting
/// the filter's `token`, with its admin API (and [`ADMIN_TOKEN`]) on `127.0.0.1:admin_port`;
/// `migrate` applies the migrations first.
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
        .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN_TOKEN);
    command
}
