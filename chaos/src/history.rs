//! What a run recorded: every fault, every caller attempt and its answer, every execution the
//! upstream logged, the after-run replay checks, and the evidence the lease-stores and
//! Envoys logged. The checker (`checker.rs`) is a pure
//! function of this; `target/chaos/<run>/history.json` is this, serialized, so a failure can
//! be investigated (and the checker re-run on it) after the fact.
//!
//! All times are milliseconds since the run started ([`Ms`]), on one clock: the harness
//! measures its own events with a monotonic clock from the run's start, and converts the
//! upstream's wall-clock timestamps with the wall-clock time it noted at that start.
//!
//! This file holds the [`History`] and the upstream's executions and replay checks;
//! `fault.rs` the faults, `attempt.rs` the callers' attempts, `ledger.rs` the upstream's
//! ledger, `policy.rs` the policy facts the judge needs.

mod attempt;
mod fault;
mod ledger;
mod policy;

pub use attempt::{Attempt, Outcome, Role};
pub use fault::{Fault, FaultKind, OperatorAction};
pub use ledger::{Ledger, Payment, Reconciliation};
pub use policy::{
    PolicyFacts, default_forget_statuses, default_max_staleness_ms, default_record_retry_budget_ms,
};
use serde::{Deserialize, Serialize};

use crate::checker::evidence::Evidence;

/// Milliseconds since the run started (negative: before it).
pub type Ms = i64;

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
