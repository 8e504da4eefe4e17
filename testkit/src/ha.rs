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

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::os::{
    alive, children_of, current_uid_is_root, send_signal, shell_quote, unique_temp_dir,
};
use crate::pg::run_checked;
use crate::process::{ChildGuard, free_port};

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

    /// Every node as Patroni's REST API (`GET /cluster`, asked of each live agent in turn)
    /// describes it; empty when no agent answers.
    pub async fn members(&self) -> Vec<Member> {
        for node in 0..NODES {
            if self.nodes[node].agent_pid().is_none() {
                continue;
            }
            let url = format!("http://127.0.0.1:{}/cluster", self.ports.rest[node]);
            let Ok(response) = self.http.get(&url).send().await else {
                continue;
            };
            let Ok(body) = response.json::<Value>().await else {
                continue;
            };
            return self.parse_members(&body);
        }
        Vec::new()
    }

    /// The node Patroni reports as the running leader, if any. A leader that just died is
    /// still reported until its key expires (up to `ttl`): etcd is Patroni's only truth.
    pub async fn leader(&self) -> Option<usize> {
        self.members()
            .await
            .into_iter()
            .find(|m| m.role == "leader" && m.state == "running")
            .map(|m| m.node)
    }

    /// Waits until one node leads and the other is its synchronous standby; returns
    /// `(leader, standby)`. Panics with the agents' logs after `timeout`.
    pub async fn wait_for_leader_and_sync_standby(&self, timeout: Duration) -> (usize, usize) {
        let deadline = Instant::now() + timeout;
        loop {
            let members = self.members().await;
            let leader = members
                .iter()
                .find(|m| m.role == "leader" && m.state == "running");
            let standby = members
                .iter()
                .find(|m| m.role == "sync_standby" && m.state == "running");
            if let (Some(leader), Some(standby)) = (leader, standby) {
                return (leader.node, standby.node);
            }
            self.check_deadline(
                deadline,
                &format!("a leader and a sync standby ({members:?})"),
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until a node other than `old` leads; returns it.
    pub async fn wait_for_leader_other_than(&self, old: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader().await
                && leader != old
            {
                return leader;
            }
            self.check_deadline(deadline, &format!("a leader other than node {old}"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Waits until the multi-host URL accepts a write (a transaction that takes an xid and
    /// commits, so it also waits for a synchronous standby when one is required).
    pub async fn wait_writable(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.writable().await {
            self.check_deadline(deadline, "the cluster to accept a write");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// One write probe through [`HaCluster::url`].
    async fn writable(&self) -> bool {
        let probe = async {
            let mut config: tokio_postgres::Config = self.url().parse().ok()?;
            config.connect_timeout(PROBE_TIMEOUT);
            let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
            let driver = tokio::spawn(connection);
            let result = client.batch_execute("SELECT txid_current()").await;
            drop(client);
            driver.abort();
            result.ok()
        };
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT * 2, probe).await,
            Ok(Some(()))
        )
    }

    /// Kills node `node` at once: its Patroni agent, its postmaster and every server
    /// process, in one `SIGKILL` (a node death; open connections see a reset).
    pub fn kill_node(&self, node: usize) {
        let node = &self.nodes[node];
        let mut agent = lock(&node.agent);
        let mut pids: Vec<u32> = agent.iter().map(ChildGuard::pid).collect();
        if let Some(postmaster) = node.postmaster_pid() {
            pids.extend(children_of(postmaster));
            pids.push(postmaster);
        }
        send_signal("KILL", &pids);
        if let Some(mut guard) = agent.take() {
            guard.kill();
        }
    }

    /// Kills the current leader's node ([`HaCluster::kill_node`]); returns which it was.
    /// Panics when no node leads.
    pub async fn kill_primary_node(&self) -> usize {
        let leader = self
            .leader()
            .await
            .unwrap_or_else(|| panic!("no leader to kill: {:?}", self.members_blocking_hint()));
        self.kill_node(leader);
        leader
    }

    /// Kills the primary's node, waits for Patroni to promote the standby and for the
    /// multi-host URL to accept a write; returns the timings. Panics after `timeout`.
    pub async fn fail_primary_node(&self, timeout: Duration) -> Failover {
        let killed_at = Instant::now();
        let old_leader = self.kill_primary_node().await;
        let new_leader = self.wait_for_leader_other_than(old_leader, timeout).await;
        let promoted_at = Instant::now();
        self.wait_writable(timeout.saturating_sub(killed_at.elapsed()))
            .await;
        Failover {
            old_leader,
            new_leader,
            killed_at,
            promoted_at,
            writable_at: Instant::now(),
        }
    }

    /// Kills only node `node`'s postmaster (its backends exit when they notice): the agent
    /// lives on and restarts Postgres in place. Returns the killed pid (for
    /// [`HaCluster::wait_for_postmaster_restart`]). Panics when the node runs no postmaster.
    pub fn kill_postmaster(&self, node: usize) -> u32 {
        let postmaster = self
            .postmaster_pid(node)
            .unwrap_or_else(|| panic!("node {node} runs no postmaster"));
        send_signal("KILL", &[postmaster]);
        postmaster
    }

    /// Node `node`'s live postmaster, if it runs one.
    pub fn postmaster_pid(&self, node: usize) -> Option<u32> {
        self.nodes[node].postmaster_pid()
    }

    /// Waits until node `node` runs a postmaster other than `old` and Patroni reports the
    /// node running again (after [`HaCluster::kill_postmaster`]).
    pub async fn wait_for_postmaster_restart(&self, node: usize, old: u32, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let restarted = self.postmaster_pid(node).is_some_and(|pid| pid != old);
            if restarted
                && self
                    .members()
                    .await
                    .iter()
                    .any(|m| m.node == node && m.state == "running")
            {
                return;
            }
            self.check_deadline(deadline, &format!("node {node}'s postmaster restarted"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Starts node `node`'s agent again (after [`HaCluster::kill_node`]) and waits until
    /// Patroni reports it running; it rejoins as a standby of the current leader.
    pub async fn restart_node(&self, node: usize) {
        if self.nodes[node].agent_pid().is_none() {
            self.spawn_agent(node);
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let members = self.members().await;
            if members
                .iter()
                .any(|m| m.node == node && m.state == "running")
            {
                return;
            }
            self.check_deadline(
                deadline,
                &format!("node {node} running again ({members:?})"),
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A planned switchover to `candidate` through Patroni's REST API; returns once
    /// `candidate` leads. The old primary is demoted: Postgres restarts as a standby.
    pub async fn switchover(&self, candidate: usize, timeout: Duration) {
        let leader = self
            .leader()
            .await
            .unwrap_or_else(|| panic!("no leader to switch over from"));
        assert_ne!(leader, candidate, "node {candidate} already leads");
        let url = format!("http://127.0.0.1:{}/switchover", self.ports.rest[leader]);
        let body = serde_json::json!({
            "leader": self.nodes[leader].name,
            "candidate": self.nodes[candidate].name,
        });
        let response = reqwest::Client::new()
            .post(&url)
            .json(&body)
            .timeout(timeout)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(status.is_success(), "POST {url}: {status}: {text}");
        let deadline = Instant::now() + timeout;
        while self.leader().await != Some(candidate) {
            self.check_deadline(deadline, &format!("node {candidate} leading"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Everything node `node`'s agent (and the Postgres it ran) logged since its last start.
    pub fn agent_log(&self, node: usize) -> String {
        lock(&self.nodes[node].agent)
            .as_ref()
            .map(ChildGuard::log)
            .unwrap_or_default()
    }

    fn parse_members(&self, body: &Value) -> Vec<Member> {
        let Some(members) = body["members"].as_array() else {
            return Vec::new();
        };
        members
            .iter()
            .filter_map(|m| {
                let name = m["name"].as_str()?;
                let node = self.nodes.iter().position(|n| n.name == name)?;
                Some(Member {
                    node,
                    role: m["role"].as_str()?.to_owned(),
                    state: m["state"].as_str()?.to_owned(),
                })
            })
            .collect()
    }

    /// A panic message's context: the pids the cluster knows about.
    fn members_blocking_hint(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "{}: agent {:?}, postmaster {:?}",
                    n.name,
                    n.agent_pid(),
                    n.postmaster_pid()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Panics with every log tail once `deadline` has passed.
    fn check_deadline(&self, deadline: Instant, what: &str) {
        if Instant::now() < deadline {
            return;
        }
        let mut message = format!(
            "timed out waiting for {what} ({})",
            self.members_blocking_hint()
        );
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(agent) = lock(&node.agent).as_ref() {
                message.push_str(&format!(
                    "\n--- node {i} agent log ---\n{}",
                    agent.log_tail()
                ));
            }
        }
        if let Some(etcd) = lock(&self.etcd).as_ref() {
            message.push_str(&format!("\n--- etcd log ---\n{}", etcd.log_tail()));
        }
        panic!("{message}");
    }

    fn render_config(&self, node: usize, options: &HaOptions) -> String {
        let dir = self.nodes[node].dir.display().to_string();
        let replacements = [
            ("@NODE@", self.nodes[node].name.clone()),
            ("@REST_PORT@", self.ports.rest[node].to_string()),
            ("@ETCD_PORT@", self.ports.etcd_client.to_string()),
            ("@TTL@", options.ttl.to_string()),
            ("@LOOP_WAIT@", options.loop_wait.to_string()),
            ("@RETRY_TIMEOUT@", options.retry_timeout.to_string()),
            ("@STRICT@", options.strict.to_string()),
            ("@PG_PORT@", self.ports.postgres[node].to_string()),
            ("@DIR@", dir),
            ("@PG_BIN@", self.pg_bin.display().to_string()),
        ];
        let mut config = PATRONI_TEMPLATE.to_owned();
        for (placeholder, value) in replacements {
            config = config.replace(placeholder, &value);
        }
        assert!(
            !config.contains('@'),
            "unreplaced placeholder in the Patroni template"
        );
        config
    }

    async fn start_etcd(&self) {
        let peer = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        let client = format!("http://127.0.0.1:{}", self.ports.etcd_client);
        let mut command = Command::new("etcd");
        command
            .arg("--name")
            .arg("keyflight")
            .arg("--data-dir")
            .arg(self.dir.join("etcd/data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("keyflight={peer}")])
            .args(["--log-level", "warn"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        let guard = ChildGuard::spawn("etcd", command);
        write_pid(&self.dir.join("etcd.pid"), guard.pid());
        *lock(&self.etcd) = Some(guard);
        let deadline = Instant::now() + START_TIMEOUT;
        let health = format!("{client}/health");
        loop {
            if let Ok(response) = self.http.get(&health).send().await
                && let Ok(body) = response.json::<Value>().await
                && body["health"] == "true"
            {
                return;
            }
            self.check_deadline(deadline, "etcd to answer /health");
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Starts node `node`'s Patroni agent (as `postgres` when we are root).
    fn spawn_agent(&self, node: usize) {
        let node_ref = &self.nodes[node];
        let mut command = if self.as_postgres_user {
            let mut command = Command::new("setpriv");
            command.args([
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--init-groups",
                "--",
                "patroni",
            ]);
            command
        } else {
            Command::new("patroni")
        };
        // Patroni reads PATRONI_* variables as configuration and libpq reads PG*: keep the
        // test's environment out of the cluster.
        command
            .arg(&node_ref.config)
            .current_dir(&node_ref.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &node_ref.dir)
            .env("LANG", "C.UTF-8");
        let guard = ChildGuard::spawn(&format!("patroni-{}", node_ref.name), command);
        write_pid(&node_ref.dir.join("patroni.pid"), guard.pid());
        *lock(&node_ref.agent) = Some(guard);
    }

    /// Spawns a shell that waits for this process to exit, then kills whatever the cluster
    /// still runs (agents first, so none restarts its Postgres) and removes the directory.
    fn spawn_watchdog(&self) {
        let dir = shell_quote(&self.dir.display().to_string());
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             for f in {dir}/node*/patroni.pid; do kill -9 $(cat \"$f\") 2>/dev/null; done; \
             for f in {dir}/node*/data/postmaster.pid; do \
               pm=$(head -n 1 \"$f\" 2>/dev/null); [ -n \"$pm\" ] && kill -9 \"$pm\" 2>/dev/null; \
             done; \
             kill -9 $(cat {dir}/etcd.pid 2>/dev/null) 2>/dev/null; sleep 1; rm -rf {dir}",
            pid = std::process::id(),
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the HA cluster watchdog");
        *lock(&self.watchdog) = Some(child);
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

/// Panics with how to install what is missing.
fn require_prerequisites(pg_bin: &Path) {
    assert!(
        pg_bin.join("initdb").is_file(),
        "Postgres binaries not found: {} has no initdb. Install Postgres 15 \
         (apt-get install postgresql-15) or point PG_BIN at its bin directory.",
        pg_bin.display()
    );
    for program in ["patroni", "etcd"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {program}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            found,
            "{program} not found: run `make ha-prereqs` (apt-get install -y patroni etcd-server)"
        );
    }
}

fn write_pid(path: &Path, pid: u32) {
    std::fs::write(path, format!("{pid}\n"))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Locks a mutex, ignoring poison: the guarded values stay consistent across a panic.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
