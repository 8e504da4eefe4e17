//! What a run recorded: every fault, every caller attempt and its answer, every execution the
//! upstream logged, the after-run replay checks, and the evidence the lease-stores and
//! Envoys logged. The checker (`checker.rs`) is a pure
//! function of this; `target/chaos/<run>/history.json` is this, serialized, so a failure can
//! be investigated (and the checker re-run on it) after the fact.
//!
//! All times are milliseconds since the run started ([`Ms`]), on one clock: the harness
//! measures its own events with a monotonic clock from the run's start, and converts the
//! upstream's wall-clock timestamps with the wall-clock time it noted at that start.

use keyflight_filter::config::Uncertain;
use keyflight_filter::guarantee::{self, Cause};
use serde::{Deserialize, Serialize};

use crate::checker::evidence::Evidence;

/// Milliseconds since the run started (negative: before it).
pub type Ms = i64;

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

/// What one caller attempt got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A complete HTTP answer.
    Answered {
        /// Its status.
        status: u16,
        /// Its body (lossy UTF-8: the demo answers JSON).
        body: String,
        /// `idempotent-replayed: true` was set.
        replayed: bool,
        /// The problem `code` of an `application/problem+json` answer.
        problem_code: Option<String>,
    },
    /// The caller gave up: its timeout ran out before the answer came.
    GaveUp,
    /// No complete answer: the connection was refused, reset or closed (a killed Envoy).
    ConnectionError {
        /// What the HTTP client said.
        error: String,
    },
}

impl Outcome {
    /// The answer, when it is a success (2xx): what a caller would keep as the operation's result.
    pub fn success(&self) -> Option<(u16, &str)> {
        match self {
            Outcome::Answered { status, body, .. } if (200..300).contains(status) => {
                Some((*status, body.as_str()))
            }
            _ => None,
        }
    }

    /// Whether it never reached the record: the store was unavailable (503
    /// `journal_unavailable`), or there was no answer at all.
    pub fn unavailable(&self) -> bool {
        match self {
            Outcome::Answered { problem_code, .. } => {
                problem_code.as_deref() == Some("journal_unavailable")
            }
            Outcome::GaveUp | Outcome::ConnectionError { .. } => true,
        }
    }

    /// The problem `code` of an answer that carried one.
    pub fn problem_code(&self) -> Option<&str> {
        match self {
            Outcome::Answered { problem_code, .. } => problem_code.as_deref(),
            Outcome::GaveUp | Outcome::ConnectionError { .. } => None,
        }
    }

    /// The label this outcome is counted under when it is not a success: the problem
    /// code, `http_<status>` for another non-2xx answer, `client_gave_up` or
    /// `connection_error`.
    pub fn error_label(&self) -> Option<String> {
        match self {
            Outcome::Answered { status, .. } if (200..300).contains(status) => None,
            Outcome::Answered {
                problem_code: Some(code),
                ..
            } => Some(code.clone()),
            Outcome::Answered { status, .. } => Some(format!("http_{status}")),
            Outcome::GaveUp => Some("client_gave_up".to_owned()),
            Outcome::ConnectionError { .. } => Some("connection_error".to_owned()),
        }
    }
}

/// Why a caller sent its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// One of the concurrent first callers of a key (a duplicate of the others).
    First,
    /// A retry sent after the first callers were done.
    Late,
    /// The same key with another body: expects 409 `idempotency_conflict`.
    Conflict,
}

/// One HTTP request a caller sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Unique in the run; sent as `x-caller-request-id`, so the upstream's log names it.
    pub id: String,
    /// The idempotency key.
    pub key: String,
    /// The caller that sent it (unique in the run).
    pub caller: String,
    /// Why that caller exists.
    pub role: Role,
    /// 0-based attempt number of its caller.
    pub attempt: u32,
    /// Which Envoy it was sent to.
    pub envoy: usize,
    /// `sha256:<hex>` of the body sent.
    pub body_sha256: String,
    /// How long the caller was prepared to wait.
    pub timeout_ms: u64,
    /// When it was sent.
    pub start_ms: Ms,
    /// When its outcome was known.
    pub end_ms: Ms,
    /// What it got.
    pub outcome: Outcome,
}

impl Attempt {
    /// When the caller received its answer; `None` when it received none.
    pub fn answered_at(&self) -> Option<Ms> {
        matches!(self.outcome, Outcome::Answered { .. }).then_some(self.end_ms)
    }
}

/// One execution from the upstream's log (`GET /executions`), its time converted to [`Ms`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    /// The upstream's execution number.
    pub execution: u64,
    /// When the upstream's handler started.
    pub at_ms: Ms,
    /// The request path.
    pub path: String,
    /// The idempotency key it saw.
    pub key: Option<String>,
    /// The `idempotency-scope` it saw (the operation: what the service's ledger keys on).
    #[serde(default)]
    pub scope: Option<String>,
    /// The `idempotency-fence` it saw, when it was a number.
    pub fence: Option<u64>,
    /// `sha256:<hex>` of the body.
    pub body_sha256: String,
    /// Which Envoy forwarded it (`x-keyflight-via`), when the header named one.
    pub via: Option<usize>,
    /// The caller attempt it came from (`x-caller-request-id`).
    pub caller_request_id: Option<String>,
    /// The status the upstream answered it with (`None`: it reset, or never finished).
    #[serde(default)]
    pub answered: Option<u16>,
    /// The upstream dropped the connection without an answer (an uncertain outcome).
    #[serde(default)]
    pub reset: bool,
}

/// The after-run check of one key: its request sent again once every fault was healed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// The key.
    pub key: String,
    /// Which Envoy was asked.
    pub envoy: usize,
    /// It sent the conflict caller's other body (which must still get 409), not the
    /// key's own.
    #[serde(default)]
    pub conflict: bool,
    /// What it answered (the last try, when it had to be retried).
    pub outcome: Outcome,
    /// How many tries it took (503 `journal_unavailable` and connection errors are retried).
    pub tries: u32,
}

/// Everything a run recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The faults, in order.
    pub faults: Vec<Fault>,
    /// Every attempt of every caller, in the order they ended.
    pub attempts: Vec<Attempt>,
    /// The upstream's executions during the run (before the replay checks).
    pub executions: Vec<Execution>,
    /// The replay checks: every key's own request through each Envoy, then the other
    /// body of each key whose conflict caller got 409.
    pub verifications: Vec<Verification>,
    /// Executions the replay checks themselves caused (a replay that ran the operation
    /// again: each is also a lost record).
    pub verification_executions: Vec<Execution>,
    /// The facts the lease-stores and Envoys logged: won claims, settle calls
    /// (`checker/evidence.rs`).
    #[serde(default)]
    pub evidence: Evidence,
    /// The run's Postgres was a replicated Patroni pair (`--ha`).
    #[serde(default)]
    pub replicated_postgres: bool,
    /// How many Postgres partitions the records were on (`--partitions`); 0: one database.
    #[serde(default)]
    pub partitions: usize,
    /// What the run's plugin policies say about failures, forgotten statuses and
    /// uncertain outcomes: what the judge's cooldown and forget rows hold a re-run to.
    #[serde(default)]
    pub policy: PolicyFacts,
    /// The policy's `lease_ms` (the partition row needs it: the lease must have run out).
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// The policy's `renew_interval_ms` and the filter's store-call timeout: the partition
    /// row bounds with them when a proxy that could reach a store would have renewed, and
    /// whether the stores logged the renews that landed.
    #[serde(default)]
    pub renewal: Option<Renewal>,
    /// The upstream's payments ledger after the run (`--upstream-effects`): the service's
    /// own evidence of which run of an operation committed, and of its reconcile answers.
    #[serde(default)]
    pub ledger: Option<Ledger>,
}

/// What the upstream's payments database and reconcile endpoint say
/// (`GET /effects/ledger`, `demo-upstream/src/reconciliations.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Every payment made under an operation.
    pub payments: Vec<Payment>,
    /// Every reconcile answer the service gave, in order.
    pub reconciliations: Vec<Reconciliation>,
}

impl Ledger {
    /// Whether the run of `scope` under `fence` made a payment that committed.
    pub fn paid(&self, scope: &str, fence: u64) -> bool {
        self.payments
            .iter()
            .any(|payment| payment.scope == scope && payment.fence == fence)
    }

    /// The first `absent` answer about `scope` at fence `fence` or higher: the service's
    /// word that no run at `fence` or below ever commits.
    pub fn fenced_out(&self, scope: &str, fence: u64) -> Option<&Reconciliation> {
        self.reconciliations
            .iter()
            .find(|answer| answer.scope == scope && answer.absent && answer.asked_fence >= fence)
    }
}

/// One payment row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// The operation.
    pub scope: String,
    /// The fence of the run that made it.
    pub fence: u64,
}

/// One answer the service gave keyflight's reconcile question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// When its transaction had committed, on the run's clock.
    pub at_ms: Ms,
    /// The operation asked about.
    pub scope: String,
    /// The fence asked about.
    pub asked_fence: u64,
    /// `absent` (the fence and every lower one fenced out); `committed` otherwise.
    pub absent: bool,
}

/// How a winner's proxy keeps its lease (`docs/record-outbox.md#renewal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    /// A renew is sent this long after the last one was (`renew_interval_ms`).
    pub interval_ms: u64,
    /// A renew that gets no answer fails after this long (`lease_store.timeout_ms`).
    pub call_timeout_ms: u64,
    /// The lease-stores log each renew that extended a lease (`evidence=renewed`), so the
    /// judge can tell when a lease was last extended. A history recorded before they did
    /// says `false`, and the partition row excuses nothing in it.
    #[serde(default)]
    pub logged: bool,
}

/// The parts of the run's plugin configuration the judge's rows depend on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFacts {
    /// `failure_cooldown_ms` (every policy of the run has the same).
    pub failure_cooldown_ms: u64,
    /// The upstream statuses released unrecorded (`forget_statuses`).
    pub forget_statuses: Vec<u16>,
    /// Paths under this prefix are guarded by an `uncertain: retry` policy; every other
    /// path by `uncertain: hold`, but those under `reconcile_prefix`.
    pub uncertain_retry_prefix: Option<String>,
    /// Paths under this prefix are guarded by an `uncertain: reconcile` policy (runs whose
    /// upstream keeps a ledger: `--upstream-effects`).
    #[serde(default)]
    pub reconcile_prefix: Option<String>,
    /// `edge_cache.max_staleness_ms`: how long after an operator change an edge may still
    /// serve the record as it was (`docs/stream-machine.md#the-edge-cache`).
    #[serde(default = "default_max_staleness_ms")]
    pub edge_max_staleness_ms: u64,
    /// `record_retry_budget_ms`: how long an outbox keeps resending a record before it may
    /// give it up (the give-up row needs it elapsed since the hand-off).
    #[serde(default = "default_record_retry_budget_ms")]
    pub record_retry_budget_ms: u64,
}

/// The filter's default `edge_cache.max_staleness_ms` (`filter/README.md#policy`).
pub fn default_max_staleness_ms() -> u64 {
    3000
}

/// The filter's default `record_retry_budget_ms` (`filter/README.md#policy`).
pub fn default_record_retry_budget_ms() -> u64 {
    120_000
}

impl Default for PolicyFacts {
    /// The filter's documented defaults (`filter/README.md#policy`) and `uncertain: hold`
    /// everywhere (the runs before the retry policy existed).
    fn default() -> Self {
        PolicyFacts {
            failure_cooldown_ms: 2000,
            forget_statuses: default_forget_statuses(),
            uncertain_retry_prefix: None,
            reconcile_prefix: None,
            edge_max_staleness_ms: default_max_staleness_ms(),
            record_retry_budget_ms: default_record_retry_budget_ms(),
        }
    }
}

impl PolicyFacts {
    /// Whether the run's plan guards `path` with a setting that never runs an operation
    /// again when its outcome is unknown (`hold`, `reconcile`: [`guarantee::at_most_once`]),
    /// whose lapsed leases are held `unknown`, never taken over. A history that names no
    /// retry prefix predates both the retry policy and holding lapses (its hold policies'
    /// lapsed leases were taken over), and says nothing here.
    pub fn held_at_most_once(&self, path: &str) -> bool {
        self.uncertain_retry_prefix.is_some() && guarantee::at_most_once(self.uncertain(path))
    }

    /// Whether `cause` lets a same-body retry of `path`'s operation run again, under the
    /// setting the plan guards it with (`docs/guarantee.md`'s table, [`guarantee::reruns`]).
    pub fn reruns(&self, cause: Cause, path: &str) -> bool {
        guarantee::reruns(cause, self.uncertain(path))
    }

    /// The `uncertain` setting the plan guards `path` with.
    pub fn uncertain(&self, path: &str) -> Uncertain {
        let under = |prefix: &Option<String>| {
            prefix
                .as_deref()
                .is_some_and(|prefix| path.starts_with(prefix))
        };
        if under(&self.uncertain_retry_prefix) {
            Uncertain::Retry
        } else if under(&self.reconcile_prefix) {
            Uncertain::Reconcile
        } else {
            Uncertain::Hold
        }
    }
}

/// The `forget_statuses` a policy has when it names none, as the guarantee lists them
/// (`docs/guarantee.md#every-answer-after-which-a-retry-runs-again`): every 3xx but 303,
/// every 4xx but 400, 404, 408, 409, 422 and 429.
pub fn default_forget_statuses() -> Vec<u16> {
    const KEPT: [u16; 7] = [303, 400, 404, 408, 409, 422, 429];
    (300..500).filter(|status| !KEPT.contains(status)).collect()
}
