//! A replicated Postgres that really fails over: etcd and two Patroni nodes per test run.
//!
//! Production Postgres is replicated and fails over (Patroni, CloudNativePG, RDS Multi-AZ):
//! for a few seconds there is no primary, then another node is one. [`HaCluster::start`]
//! builds that from Debian's packages (`patroni`, `etcd-server`; `make ha-prereqs` installs
//! them): one etcd as the consensus store, two Patroni agents each managing a Postgres 15
//! node, all on free loopback ports in one fresh temp directory, so any number of clusters
//! (and the single-node [`crate::pg::PgCluster`]s) coexist. It returns once one node leads
//! and the other streams as its *synchronous* standby. [`Drop`] stops everything and removes
//! the directory; a watchdog does the same if the test process dies without dropping it.
//!
//! ## What the cluster guarantees, and the settings behind it
//! `synchronous_mode: true`: the primary's commits wait until the standby has flushed them,
//! and Patroni promotes only a node that was synchronous (it removes a standby from the
//! synchronous set in etcd *before* it lets the primary commit without it). So a failover
//! never loses an acknowledged commit. `synchronous_mode_strict` is off by default
//! ([`HaOptions::strict`]): when the standby is gone the primary keeps committing alone, and
//! the standby may not be promoted until it has caught up. With two nodes, strict mode would
//! turn every single node loss, including the one a failover leaves behind, into a write
//! outage until the lost node is back; what it buys is that an acknowledged commit survives
//! a *second* fault (the lone primary's disk lost for good). deploy/README.md says what
//! production should run (three nodes, strict).
//!
//! Failure detection is tuned down for tests: the leader key lives [`HaOptions::ttl`]
//! (default 6 s) and is refreshed every `loop_wait` (1 s), so a dead primary is replaced
//! within about `ttl` (Patroni's defaults, 30 s / 10 s, make that half a minute).
//!
//! ## Faults
//! - [`HaCluster::kill_node`] / [`HaCluster::kill_primary_node`]: `SIGKILL` to the node's
//!   Patroni agent, its postmaster and every server process at once — a node death. The
//!   leader key expires and the synchronous standby is promoted.
//! - [`HaCluster::kill_postmaster`]: `SIGKILL` to the postmaster only (its backends exit
//!   with it). The agent notices and restarts Postgres in place: a crash-restart, no failover.
//! - [`HaCluster::switchover`]: a planned switch through Patroni's REST API; the old
//!   primary is demoted (restarted as a standby).
//! - [`HaCluster::restart_node`]: a killed node comes back and rejoins as a standby
//!   (`pg_rewind` when its timeline diverged).
//!
//! ## For a fault-injection runner
//! ```no_run
//! # async fn demo() {
//! use keyflight_testkit::ha::{HaCluster, HaOptions};
//! use std::time::Duration;
//! let ha = HaCluster::start(HaOptions::default()).await;
//! let url = ha.url(); // give this to the lease-store
//! // … start the workload …
//! let failover = ha.fail_primary_node(Duration::from_secs(60)).await;
//! println!("{failover}"); // killed node, new leader, kill → promoted → writable
//! ha.restart_node(failover.old_leader).await; // heal: the next fault finds a standby again
//! ha.wait_for_leader_and_sync_standby(Duration::from_secs(60)).await;
//! # }
//! ```
//!
//! Postgres refuses to run as root, and CI runs as root: then the directory belongs to
//! `postgres` and the agents run as `postgres` (`setpriv`, which execs, so the pid a test
//! holds is the agent's own), and Patroni runs the server binaries as that user.

mod faults;
mod observe;
mod processes;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::os::{
    alive, children_of, current_uid_is_root, send_signal, shell_quote, spawn_watchdog_shell,
    unique_temp_dir,
};
use crate::pg::run_checked;
use crate::process::{ChildGuard, free_port};
use processes::require_prerequisites;

/// The Patroni configuration of one node, with `@NAME@` placeholders.
const PATRONI_TEMPLATE: &str = include_str!("patroni.yml.in");

/// Where the Postgres 15 binaries live unless `PG_BIN` says otherwise.
const DEFAULT_PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// How many Postgres nodes a cluster has.
pub const NODES: usize = 2;

/// How often waits re-check (pacing only).
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long one REST or SQL probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long start-up may take: two Patroni agents, an initdb and a base backup, on a
/// machine that may be busy with other tests.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// What the cluster runs. The defaults are what the tests use.
#[derive(Debug, Clone)]
pub struct HaOptions {
    /// Patroni's `ttl`, seconds: how long the leader key outlives its last refresh, so the
    /// longest a dead primary keeps its role.
    pub ttl: u32,
    /// Patroni's `loop_wait`, seconds: how often each agent runs its loop.
    pub loop_wait: u32,
    /// Patroni's `retry_timeout`, seconds: how long etcd or Postgres may fail before the
    /// leader demotes itself. Patroni needs `loop_wait + 2 * retry_timeout <= ttl`.
    pub retry_timeout: u32,
    /// `synchronous_mode_strict`: without a synchronous standby, commits block instead of
    /// proceeding on the primary alone (see the module docs).
    pub strict: bool,
    /// Fixed ports (the demo stack); free ports when `None`.
    pub ports: Option<HaPorts>,
}

impl Default for HaOptions {
    fn default() -> Self {
        HaOptions {
            ttl: 6,
            loop_wait: 1,
            retry_timeout: 2,
            strict: false,
            ports: None,
        }
    }
}

/// The ports of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaPorts {
    /// etcd's client port (Patroni talks to it).
    pub etcd_client: u16,
    /// etcd's peer port (unused by a one-member etcd, but it must listen somewhere).
    pub etcd_peer: u16,
    /// Each node's Postgres port.
    pub postgres: [u16; NODES],
    /// Each node's Patroni REST API port.
    pub rest: [u16; NODES],
}

impl HaPorts {
    fn free() -> HaPorts {
        HaPorts {
            etcd_client: free_port(),
            etcd_peer: free_port(),
            postgres: [free_port(), free_port()],
            rest: [free_port(), free_port()],
        }
    }
}

/// What Patroni says about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node's index (0 or 1).
    pub node: usize,
    /// `leader`, `sync_standby`, `replica`, …
    pub role: String,
    /// `running`, `starting`, `stopped`, …
    pub state: String,
}

/// One node's death and the cluster's answer to it, as measured by [`HaCluster::fail_primary_node`].
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    /// The node that was primary and was killed.
    pub old_leader: usize,
    /// The node Patroni promoted.
    pub new_leader: usize,
    /// When the node was killed.
    pub killed_at: Instant,
    /// When Patroni first reported the new leader running.
    pub promoted_at: Instant,
    /// When the multi-host URL first accepted a write again.
    pub writable_at: Instant,
}

impl Failover {
    /// Kill to the first accepted write: how long no primary took writes.
    pub fn window(&self) -> Duration {
        self.writable_at.saturating_duration_since(self.killed_at)
    }
}

impl fmt::Display for Failover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} killed; node {} promoted after {} ms, writable after {} ms",
            self.old_leader,
            self.new_leader,
            self.promoted_at
                .saturating_duration_since(self.killed_at)
                .as_millis(),
            self.window().as_millis()
        )
    }
}

/// One Patroni node: its directory, config and (while it runs) agent.
struct Node {
    name: String,
    dir: PathBuf,
    config: PathBuf,
    agent: Mutex<Option<ChildGuard>>,
}

impl Node {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The running postmaster's pid, from `postmaster.pid`, if it is alive.
    fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        let pid = text.lines().next()?.trim().parse().ok()?;
        alive(pid).then_some(pid)
    }

    fn agent_pid(&self) -> Option<u32> {
        lock(&self.agent).as_ref().map(ChildGuard::pid)
    }
}

/// A running etcd + two-node Patroni cluster owned by this test process.
pub struct HaCluster {
    dir: PathBuf,
    pg_bin: PathBuf,
    as_postgres_user: bool,
    ports: HaPorts,
    etcd: Mutex<Option<ChildGuard>>,
    nodes: [Node; NODES],
    http: reqwest::Client,
    watchdog: Mutex<Option<Child>>,
}

impl HaCluster {
    /// Starts etcd and both nodes and waits until one leads and the other is its
    /// synchronous standby. Panics with a clear message (and the logs) otherwise.
    pub async fn start(options: HaOptions) -> HaCluster {
        let pg_bin = std::env::var_os("PG_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_PG_BIN));
        require_prerequisites(&pg_bin);
        assert!(
            options.loop_wait + 2 * options.retry_timeout <= options.ttl,
            "Patroni needs loop_wait + 2 * retry_timeout <= ttl: {options:?}"
        );
        let ports = options.ports.unwrap_or_else(HaPorts::free);
        let dir = unique_temp_dir("ha");
        let nodes = [0, 1].map(|i| {
            let name = format!("node{i}");
            let node_dir = dir.join(&name);
            Node {
                config: dir.join(format!("{name}.yml")),
                name,
                dir: node_dir,
                agent: Mutex::new(None),
            }
        });
        for node in &nodes {
            std::fs::create_dir_all(&node.dir).expect("create the node directory");
        }
        std::fs::create_dir_all(dir.join("etcd")).expect("create the etcd directory");
        let as_postgres_user = current_uid_is_root();
        let http = reqwest::Client::builder()
            .timeout(PROBE_TIMEOUT)
            .build()
            .expect("build an HTTP client");
        let cluster = HaCluster {
            dir,
            pg_bin,
            as_postgres_user,
            ports,
            etcd: Mutex::new(None),
            nodes,
            http,
            watchdog: Mutex::new(None),
        };
        for (i, node) in cluster.nodes.iter().enumerate() {
            let config = cluster.render_config(i, &options);
            std::fs::write(&node.config, config)
                .unwrap_or_else(|e| panic!("write {}: {e}", node.config.display()));
        }
        if as_postgres_user {
            run_checked(
                Command::new("chown")
                    .arg("-R")
                    .arg("postgres:")
                    .arg(&cluster.dir),
            );
        }
        cluster.spawn_watchdog();
        cluster.start_etcd().await;
        for node in 0..NODES {
            cluster.spawn_agent(node);
        }
        cluster
            .wait_for_leader_and_sync_standby(START_TIMEOUT)
            .await;
        cluster
    }

    /// The multi-host URL for the `postgres` superuser on database `postgres`: libpq and
    /// tokio-postgres try each host in turn and keep the one that accepts writes.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// [`HaCluster::url`] for database `database`.
    pub fn url_for(&self, database: &str) -> String {
        let hosts: Vec<String> = self
            .ports
            .postgres
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!(
            "postgres://postgres@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// A URL for node `node` alone (whatever its role).
    pub fn node_url(&self, node: usize) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.ports.postgres[node]
        )
    }

    /// The cluster's ports.
    pub fn ports(&self) -> HaPorts {
        self.ports
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        if let Some(mut child) = lock(&self.watchdog).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Agents first: a live agent would restart the Postgres we stop.
        for node in &self.nodes {
            if let Some(mut agent) = lock(&node.agent).take() {
                agent.kill();
            }
        }
        // An immediate shutdown (what `pg_ctl stop -m immediate` sends), then SIGKILL for
        // whatever is left after a few seconds.
        let postmasters: Vec<u32> = self.nodes.iter().filter_map(Node::postmaster_pid).collect();
        send_signal("QUIT", &postmasters);
        let deadline = Instant::now() + Duration::from_secs(5);
        while postmasters.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
            std::thread::sleep(POLL_INTERVAL);
        }
        send_signal("KILL", &postmasters);
        if let Some(mut etcd) = lock(&self.etcd).take() {
            etcd.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Locks a mutex, ignoring poison: the guarded values stay consistent across a panic.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
