//! The faults a run injects: each [`FaultKind`] with what it breaks, the [`Fault`] as
//! recorded from injection until the part was healthy again, and what an operator action
//! did. The judge reads them to know which windows excuse which answers.

use serde::{Deserialize, Serialize};

use super::Ms;

/// The kinds of fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A lease-store replica killed with SIGKILL, then started again on the same port.
    StoreKill,
    /// A lease-store replica frozen with SIGSTOP (longer than the filter's call timeout),
    /// then resumed with SIGCONT.
    StoreFreeze,
    /// Postgres stopped as a crash would (`pg_ctl stop -m immediate`), then started again.
    /// On a replicated Postgres (`--ha`): the primary's postmaster killed, which its
    /// Patroni agent restarts in place.
    PostgresCrash,
    /// Postgres frozen with SIGSTOP (every process: a hung host or a stalled VM), then
    /// resumed with SIGCONT; sometimes past the lease-stores' answer bound, so a claim a
    /// store gave up on may commit after it answered, and past the lease. On a partitioned
    /// database, one partition. Not on a replicated one, where a frozen primary fails over.
    PostgresFreeze,
    /// An Envoy killed with SIGKILL, then started again on the same ports.
    EnvoyKill,
    /// On a replicated Postgres (`--ha`) only: the primary's node dies (its Patroni agent
    /// and postmaster killed), Patroni promotes the synchronous standby, and the dead node
    /// rejoins as the new standby.
    PrimaryNodeDeath,
    /// A new plugin configuration pushed to Envoy 0 by LDS while claims are in flight (the
    /// edge cache switched off, or on again): a new plugin instance replaces the old one,
    /// which keeps delivering its outbox.
    PluginPush,
    /// An Envoy cut off from every lease-store (nftables drops both ways in its network
    /// namespace) while the stores and Postgres stay healthy; sometimes for longer than the
    /// lease.
    ProxyPartition,
    /// A lease-store cut off from Postgres (nftables drops both ways in its namespace).
    StoreDbPartition,
    /// Every lease-store's answers to an Envoy lost (nftables drops inbound in its
    /// namespace); its calls still arrive and are acted on.
    OneWayLoss,
    /// The links between an Envoy and every lease-store slowed (an `htb` class with a
    /// `tbf` rate of a few hundred bytes a second each way) until calls outlast the
    /// filter's call timeout.
    SlowLink,
    /// An Envoy drained as a pod's termination drains it (`POST /drain_listeners?graceful`,
    /// held a while), then `SIGTERM`, then started again on the same ports
    /// (`faults/lifecycle.rs`).
    EnvoyDrain,
    /// Envoy 0's Wasm module replaced by LDS (a new build, then back to the original: an
    /// upgrade and a rollback): a new VM, the old one retired and destroyed.
    WasmUpgrade,
    /// Envoy 1 replaced, as a rollout replaces a pod (`SIGTERM`, then a new process on the
    /// same ports), by one running the previous release's `.wasm`, and by the next one by
    /// this release's again: a mixed-version mesh in between, a rollback and an upgrade.
    RollingUpgrade,
    /// An Envoy hot restarted: the next restart epoch started beside it, on its base id,
    /// takes its sockets over; the old process (the parent) drains and exits a few seconds
    /// later, its VMs and outbox with it (`faults/lifecycle.rs`).
    EnvoyHotRestart,
    /// An operator erases the newest record in one state (`completed`, `pending` or
    /// `unknown`, in turn) through a lease-store's admin API (`DELETE /v1/records/{scope}`):
    /// a retry with its key runs again.
    OperatorErase,
    /// An operator resolves the newest `unknown` record as completed, with a response of
    /// its own, through a lease-store's admin API.
    OperatorResolve,
    /// An operator resolves the newest `unknown` record as failed (the operation did not
    /// happen): the next same-body request takes it over and runs.
    OperatorResolveFailed,
}

impl FaultKind {
    /// Every kind, in table order.
    pub const ALL: [FaultKind; 18] = [
        FaultKind::StoreKill,
        FaultKind::StoreFreeze,
        FaultKind::PostgresCrash,
        FaultKind::PostgresFreeze,
        FaultKind::EnvoyKill,
        FaultKind::PrimaryNodeDeath,
        FaultKind::PluginPush,
        FaultKind::ProxyPartition,
        FaultKind::StoreDbPartition,
        FaultKind::OneWayLoss,
        FaultKind::SlowLink,
        FaultKind::EnvoyDrain,
        FaultKind::WasmUpgrade,
        FaultKind::RollingUpgrade,
        FaultKind::EnvoyHotRestart,
        FaultKind::OperatorErase,
        FaultKind::OperatorResolve,
        FaultKind::OperatorResolveFailed,
    ];

    /// The kinds a run on a single Postgres can inject.
    pub const SINGLE_POSTGRES: [FaultKind; 17] = [
        FaultKind::StoreKill,
        FaultKind::StoreFreeze,
        FaultKind::PostgresCrash,
        FaultKind::PostgresFreeze,
        FaultKind::EnvoyKill,
        FaultKind::PluginPush,
        FaultKind::ProxyPartition,
        FaultKind::StoreDbPartition,
        FaultKind::OneWayLoss,
        FaultKind::SlowLink,
        FaultKind::EnvoyDrain,
        FaultKind::WasmUpgrade,
        FaultKind::RollingUpgrade,
        FaultKind::EnvoyHotRestart,
        FaultKind::OperatorErase,
        FaultKind::OperatorResolve,
        FaultKind::OperatorResolveFailed,
    ];

    /// The kinds a run on a replicated Postgres can inject (its parts share the host's
    /// network: no link faults).
    pub const REPLICATED_POSTGRES: [FaultKind; 13] = [
        FaultKind::StoreKill,
        FaultKind::StoreFreeze,
        FaultKind::PostgresCrash,
        FaultKind::EnvoyKill,
        FaultKind::PrimaryNodeDeath,
        FaultKind::PluginPush,
        FaultKind::EnvoyDrain,
        FaultKind::WasmUpgrade,
        FaultKind::RollingUpgrade,
        FaultKind::EnvoyHotRestart,
        FaultKind::OperatorErase,
        FaultKind::OperatorResolve,
        FaultKind::OperatorResolveFailed,
    ];

    /// The kinds made by cutting links: they need the parts in network namespaces.
    pub const NETWORK: [FaultKind; 4] = [
        FaultKind::ProxyPartition,
        FaultKind::StoreDbPartition,
        FaultKind::OneWayLoss,
        FaultKind::SlowLink,
    ];

    /// The link faults that keep a proxy's renews from landing: a cut, or a link slowed until
    /// calls time out. A one-way loss is not one: the stores still get the renews and apply
    /// them, so a lease cannot run out under it.
    pub const KEEPS_RENEWS_OUT: [FaultKind; 2] = [FaultKind::ProxyPartition, FaultKind::SlowLink];

    /// Whether it takes the database down (every lease-store waits for its heal).
    pub fn breaks_the_database(self) -> bool {
        matches!(
            self,
            FaultKind::PostgresCrash | FaultKind::PostgresFreeze | FaultKind::PrimaryNodeDeath
        )
    }

    /// The name used in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::StoreKill => "store kill",
            FaultKind::StoreFreeze => "store freeze",
            FaultKind::PostgresCrash => "postgres crash",
            FaultKind::PostgresFreeze => "postgres freeze",
            FaultKind::EnvoyKill => "envoy kill",
            FaultKind::PrimaryNodeDeath => "primary node death",
            FaultKind::PluginPush => "plugin push",
            FaultKind::ProxyPartition => "proxy partition",
            FaultKind::StoreDbPartition => "store db partition",
            FaultKind::OneWayLoss => "one way loss",
            FaultKind::SlowLink => "slow link",
            FaultKind::EnvoyDrain => "envoy drain",
            FaultKind::WasmUpgrade => "wasm upgrade",
            FaultKind::RollingUpgrade => "rolling upgrade",
            FaultKind::EnvoyHotRestart => "envoy hot restart",
            FaultKind::OperatorErase => "operator erase",
            FaultKind::OperatorResolve => "operator resolve",
            FaultKind::OperatorResolveFailed => "operator resolve failed",
        }
    }
}

/// One injected fault, from the moment it was injected until the part was healthy again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// Its position in the run (0-based).
    pub id: usize,
    /// What was done.
    pub kind: FaultKind,
    /// Which replica (lease-store or Envoy index; 0 for Postgres).
    pub target: usize,
    /// When it was injected (just before the signal or `pg_ctl`).
    pub start_ms: Ms,
    /// When the part answered its readiness probe again (or was resumed, for a freeze).
    pub end_ms: Ms,
    /// A primary node death's failover window: from the kill to the first write the
    /// multi-host URL accepted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_window_ms: Option<u64>,
    /// A proxy-lifecycle fault's moment the old Envoy process or Wasm VM was gone with its
    /// outbox (`faults/lifecycle.rs`): the `SIGTERM` of a drain, the moment a module push's
    /// old VMs were seen destroyed, the moment a hot restart's parent was seen exited.
    /// `None` when it was not seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_gone_ms: Option<Ms>,
    /// An Envoy kill's, drain's or rolling upgrade's moment the old Envoy process was seen
    /// exited (reaped after its `SIGKILL`, or after its `SIGTERM`), before its replacement
    /// started: the process runs on for a moment after the fault's start, so a claim the
    /// store stamps in between came from it. `None` when it was not recorded (the kill's
    /// start or the `SIGTERM` then stands for the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_exited_ms: Option<Ms>,
    /// A hot restart's parent: the restart epoch of the process that drained and exited
    /// (its evidence lines carry it, `checker/evidence.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_epoch: Option<u32>,
    /// A rolling upgrade's result: whether the Envoy runs the previous release after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_release: Option<bool>,
    /// An operator action's record: on which scope, and what the admin API answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorAction>,
    /// A link fault's span in which it certainly held: from the moment its rules were in
    /// place (the command that applied them had returned) to the moment their removal
    /// began. `start_ms`..`end_ms` brackets it; the partition row is judged on this span
    /// (`checker/partition.rs`), and excuses nothing without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_ms: Option<(Ms, Ms)>,
}

/// What an operator action did (its [`Fault`] says when: from the list call to the
/// change's answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorAction {
    /// The scope digest acted on (`None`: no record in the state it acts on).
    pub scope: Option<String>,
    /// The admin API's status for the change (200: done).
    pub answered: Option<u16>,
    /// A resolve's recorded answer, status and body: what every later replay must be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<(u16, String)>,
    /// The state of the record it acted on (absent in histories before erases of other
    /// states were drawn: `completed` for an erase, `unknown` for a resolve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl OperatorAction {
    /// Whether the admin API said the change was made.
    pub fn done(&self) -> bool {
        self.answered == Some(200)
    }
}

impl Fault {
    /// Whether the fault was active at some point of `[start, end]`.
    pub fn overlaps(&self, start: Ms, end: Ms) -> bool {
        self.start_ms <= end && start <= self.end_ms
    }
}
