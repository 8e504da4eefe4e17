//! What the judge says about a key (`judgement.rs`) and each of its re-runs (`rerun.rs`):
//! the rows of the guarantee table (`docs/guarantee.md#where-it-is-at-least-once`) a re-run
//! can be excused by, and every finding that fails a run.

use keyflight_filter::guarantee::Cause;
use serde::Serialize;

use crate::history::{Ms, Outcome};

/// The rows of the guarantee table a re-run can be excused by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Row {
    /// The winner's proxy died after dispatching upstream and before any settle landed.
    ProxyDied {
        /// The Envoy kill or drain (fault id; `lifecycle.rs`).
        fault: usize,
        /// Its caller already had its answer (the record was in the outbox).
        answer_delivered: bool,
    },
    /// The winner's outbox held the settle call when its root context was retired, and a
    /// push of another module destroyed that VM before any settle landed (`lifecycle.rs`).
    VmRetired {
        /// The module push (fault id).
        fault: usize,
        /// Its caller already had its answer (the record was in the outbox).
        answer_delivered: bool,
    },
    /// The winner's Envoy was hot restarted, and its parent process exited with the settle
    /// call still in its outbox before any settle landed (`lifecycle.rs`).
    ParentExited {
        /// The hot restart (fault id).
        fault: usize,
        /// Its caller already had its answer (the record was in the outbox).
        answer_delivered: bool,
    },
    /// The winner's outbox gave the settle call up (its retry budget, a full outbox).
    OutboxGaveUp,
    /// The upstream answered a status the policy forgets; the record was released
    /// (`release_forget`) and the re-run's claim inserted a fresh one after that.
    Forgotten {
        /// What the upstream answered the earlier execution.
        status: u16,
    },
    /// The upstream answered a status the previous release forgets and this one records
    /// (a `303`), through an Envoy a rolling upgrade had moved to the previous release; the
    /// record was released (`release_forget`) and the re-run's claim inserted a fresh one
    /// after that (`lifecycle.rs`).
    ForgottenByThePreviousRelease {
        /// What the upstream answered the earlier execution.
        status: u16,
        /// The rolling upgrade that moved that Envoy to the previous release (fault id).
        fault: usize,
    },
    /// The earlier execution failed retryably (the upstream answered a `5xx`, `408` or
    /// `429`) or, under `uncertain: retry`, with an uncertain outcome; the record was
    /// released as `release_cooldown` and the re-run took it over once the cooldown had
    /// passed.
    Cooldown {
        /// Why the record cooled down.
        cause: CooldownCause,
    },
    /// The winner's proxy was cut off from every lease-store until its lease ran out,
    /// while the stores and Postgres were healthy (`partition.rs`).
    ProxyPartitioned {
        /// The proxy partition (fault id).
        fault: usize,
        /// Its caller already had its answer (the record was in the outbox).
        answer_delivered: bool,
    },
    /// An operator erased the record after the earlier claim, and the re-run's chain
    /// starts with a fresh insert after the erase (`operator.rs`).
    OperatorErased {
        /// The erase (fault id).
        fault: usize,
    },
    /// An operator resolved the `unknown` record as failed after the earlier claim, and the
    /// re-run's chain starts with the takeover of that failed record (`operator.rs`).
    OperatorResolvedFailed {
        /// The resolve (fault id).
        fault: usize,
    },
    /// Under `uncertain: reconcile` the service answered `absent` about the earlier fence
    /// (or a higher one) before the re-run started, fencing it out; the re-run's chain
    /// starts with the takeover of the record that answer freed (`reconcile.rs`).
    ReconciledAbsent {
        /// The fence the service was asked about.
        asked_fence: u64,
        /// When it answered, by the upstream's log.
        answered_ms: Ms,
    },
}

impl Row {
    /// The cause the guarantee's table names for this row (`keyflight_filter::guarantee`).
    pub fn cause(self) -> Cause {
        match self {
            Row::ProxyDied { .. }
            | Row::VmRetired { .. }
            | Row::ParentExited { .. }
            | Row::OutboxGaveUp
            | Row::ProxyPartitioned { .. } => Cause::ProxyLost,
            Row::Forgotten { .. } | Row::ForgottenByThePreviousRelease { .. } => {
                Cause::ForgottenStatus
            }
            Row::Cooldown {
                cause: CooldownCause::RetryableStatus(_),
            } => Cause::RetryableStatus,
            Row::Cooldown {
                cause: CooldownCause::UpstreamReset | CooldownCause::CallerGotNoAnswer,
            } => Cause::UncertainOutcome,
            Row::OperatorErased { .. } | Row::OperatorResolvedFailed { .. } => Cause::Operator,
            Row::ReconciledAbsent { .. } => Cause::ServiceAnsweredAbsent,
        }
    }

    /// Whether the caller had the answer while the record waited in an outbox that then
    /// lost it (the proxy died, or the takeover won while it was cut off).
    pub(super) fn answer_lost_with_proxy(self) -> bool {
        matches!(
            self,
            Row::ProxyDied {
                answer_delivered: true,
                ..
            } | Row::ProxyPartitioned {
                answer_delivered: true,
                ..
            } | Row::VmRetired {
                answer_delivered: true,
                ..
            } | Row::ParentExited {
                answer_delivered: true,
                ..
            }
        )
    }
}

/// Why a record was released as a failure with a cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CooldownCause {
    /// The upstream answered this retryable status.
    RetryableStatus(u16),
    /// The upstream dropped the connection without an answer, under `uncertain: retry`.
    UpstreamReset,
    /// The caller got no answer (it gave up, or its connection was closed: a listener
    /// drained by a configuration push) while the upstream ran, under `uncertain: retry`.
    CallerGotNoAnswer,
}

/// How much earlier than its log line a release may have committed: a store logs a settle
/// after its commit, which is what frees the record (a forget) or starts its cooldown, so
/// a claim that needed the commit can be logged, by another store, a little before it.
pub const SETTLE_LOG_SLACK_MS: Ms = 250;

/// How a re-run was judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum RerunVerdict {
    /// Every condition of `row` is shown.
    Excused {
        /// The row.
        row: Row,
        /// The Envoy the earlier execution came through.
        envoy: usize,
        /// The earlier execution's fence.
        earlier_fence: u64,
        /// The claim that took the earlier one's expired lease over.
        takeover_fence: u64,
        /// The re-run's fence.
        later_fence: u64,
    },
    /// Not allowed by the guarantee.
    Unexcused {
        /// The condition that is not shown.
        reason: String,
    },
}

/// One execution of a key after its first, judged against the one before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rerun {
    /// The earlier execution's number.
    pub earlier: u64,
    /// The re-run's execution number.
    pub later: u64,
    /// The judgement.
    pub verdict: RerunVerdict,
}

/// What a key's record must still answer after the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "expected", rename_all = "snake_case")]
pub enum Expected {
    /// A delivered answer (a 2xx, or a recorded 4xx), status and body.
    Answer {
        /// Its status.
        status: u16,
        /// Its body.
        body: String,
    },
    /// 409 `operation_unknown`: a caller saw the record `unknown`.
    Unknown,
    /// An answer of the upstream's (not a problem of keyflight's): a caller saw the record
    /// `unknown` under `uncertain: reconcile`, and once everything healed the service's
    /// answer settles it — the first run's answer replayed, or a run under a higher fence.
    Reconciled,
    /// 409 `idempotency_conflict` for the other body.
    Conflict,
}

/// An after-run check that did not get what the record must answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostRecord {
    /// The Envoy the check asked.
    pub envoy: usize,
    /// What it had to answer.
    pub expected: Expected,
    /// What came back instead.
    pub replay: Outcome,
}

/// Everything the judge found about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyVerdict {
    /// The key.
    pub key: String,
    /// Its executions' numbers, in order.
    pub executions: Vec<u64>,
    /// Every execution after the first, judged.
    pub reruns: Vec<Rerun>,
    /// Delivered answers (2xx, or a recorded 3xx or 4xx) whose execution's record was lost with its proxy: it
    /// died, or was cut off until its lease ran out (excused from replaying; the documented case
    /// seen from the caller).
    pub died_with_proxy: Vec<(u16, String)>,
    /// The distinct successful answers beyond those, when there was more than one.
    pub divergent_answers: Vec<(u16, String)>,
    /// Checks that did not answer what the record must.
    pub lost: Vec<LostRecord>,
    /// Executions that started after a caller saw the record `unknown`.
    pub ran_after_unknown: Vec<u64>,
    /// Re-runs (execution numbers) of a hold-policy key whose earlier execution the
    /// upstream's log shows committed: the operation ran twice for certain (`doubles.rs`).
    pub certain_doubles: Vec<u64>,
    /// The after-run check could not be made for this key.
    pub unverified: bool,
    /// The faults active while its requests ran (fault ids).
    pub faults: Vec<usize>,
}

impl KeyVerdict {
    /// Executed more than once with a re-run the guarantee does not excuse.
    pub fn unexcused(&self) -> bool {
        self.reruns
            .iter()
            .any(|rerun| matches!(rerun.verdict, RerunVerdict::Unexcused { .. }))
    }

    /// Executed more than once, every re-run excused.
    pub fn excused(&self) -> bool {
        !self.reruns.is_empty() && !self.unexcused()
    }

    /// Anything that fails the run.
    pub fn fails(&self) -> bool {
        self.unexcused()
            || !self.divergent_answers.is_empty()
            || !self.lost.is_empty()
            || !self.ran_after_unknown.is_empty()
            || !self.certain_doubles.is_empty()
            || self.unverified
    }
}
