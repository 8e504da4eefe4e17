//! The judgement of one key: its executions, its callers' answers and its after-run
//! checks, held to the guarantee table (`docs/guarantee.md#where-it-is-at-least-once`)
//! row by row, from the evidence (`evidence.rs`) rather than from time windows.
//!
//! A **re-run** (any execution after a key's first) is excused only when every
//! condition of one row is shown (see [`judge_rerun`]); each of the other findings — a
//! divergent answer, a record that does not replay, an `unknown` record that ran again —
//! is judged on its own: a delivered answer is excused from replaying only when the very
//! execution that produced it is the one a dead proxy's outbox lost (its lease taken over,
//! or, under a hold policy, held `unknown`: [`answer_lost_to_a_held_lapse`]).

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use keyflight_filter::guarantee::Cause;

use super::doubles::certain_doubles;
use super::evidence::{ClaimWon, DbStamps, Release, STAMP_ROUNDING_MS, TAKEOVER};
use super::lifecycle::{
    answered_by_the_previous_release, parent_exited, previous_release_forgot, process_ended,
    vm_retired,
};
use super::operator;
use super::partition::{Earlier, proxy_partitioned};
use super::reconcile::reconciled_absent;
use super::report::key_faults;
use super::takeover::{
    at_most_once_takeover, gave_up_after_its_budget, lease_ran_out, replayed_before,
};
use crate::history::{Attempt, Execution, History, Ms, Outcome, Role};

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
    /// Whether the caller had the answer while the record waited in an outbox that then
    /// lost it (the proxy died, or the takeover won while it was cut off).
    fn answer_lost_with_proxy(self) -> bool {
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

/// Statuses the filter records and replays besides 2xx (`docs/guarantee.md#what-a-caller-sees`).
const RECORDED_NON_2XX: [u16; 5] = [303, 400, 404, 409, 422];

/// What one key's judgement reads.
pub struct KeyFacts<'a> {
    /// The key.
    pub key: &'a str,
    /// Its callers' attempts.
    pub attempts: &'a [&'a Attempt],
    /// Its executions, during the run and caused by the checks.
    pub executions: Vec<&'a Execution>,
}

/// Judges one key.
pub fn judge_key(
    facts: KeyFacts<'_>,
    history: &History,
    attempts_by_id: &HashMap<&str, &Attempt>,
) -> KeyVerdict {
    let KeyFacts {
        key,
        attempts,
        mut executions,
    } = facts;
    executions.sort_by_key(|execution| execution.execution);
    let reruns: Vec<Rerun> = executions
        .windows(2)
        .map(|pair| Rerun {
            earlier: pair[0].execution,
            later: pair[1].execution,
            verdict: judge_rerun(pair[0], pair[1], attempts_by_id, history),
        })
        .collect();

    // An answer is excused from replaying only when its own execution's record was lost
    // with its proxy (dead, or cut off until its lease ran out) after the answer went out: taken
    // over by a re-run, or held `unknown` under a hold policy.
    let held_lost = executions
        .iter()
        .filter(|execution| answer_lost_to_a_held_lapse(execution, attempts_by_id, history))
        .filter_map(|execution| execution.caller_request_id.as_deref());
    let lost_with_proxy: BTreeSet<&str> = reruns
        .iter()
        .filter(|rerun| {
            matches!(
                rerun.verdict,
                RerunVerdict::Excused { row, .. } if row.answer_lost_with_proxy()
            )
        })
        .filter_map(|rerun| executions.iter().find(|e| e.execution == rerun.earlier))
        .filter_map(|execution| execution.caller_request_id.as_deref())
        .chain(held_lost)
        .collect();
    let own = |attempt: &&&Attempt| attempt.role != Role::Conflict;
    // A recorded 3xx or 4xx lost with its proxy is excused from replaying like a 2xx.
    let lost_non_2xx: Vec<&Attempt> = attempts
        .iter()
        .filter(|attempt| lost_with_proxy.contains(attempt.id.as_str()))
        .copied()
        .collect();
    let mut died_with_proxy: BTreeSet<(u16, String)> = recorded_non_2xx(&lost_non_2xx)
        .into_iter()
        .filter_map(|(_, expected)| match expected {
            Expected::Answer { status, body } => Some((status, body)),
            _ => None,
        })
        .collect();
    let mut answered = Vec::new();
    for attempt in attempts.iter().filter(own) {
        if let Some((status, body)) = attempt.outcome.success() {
            let answer = (status, body.to_owned());
            let fresh = matches!(
                attempt.outcome,
                Outcome::Answered {
                    replayed: false,
                    ..
                }
            );
            if fresh && lost_with_proxy.contains(attempt.id.as_str()) {
                died_with_proxy.insert(answer);
            } else {
                let claimed_ms = fresh
                    .then(|| {
                        executions
                            .iter()
                            .find(|e| e.caller_request_id.as_deref() == Some(&attempt.id))
                    })
                    .flatten()
                    .and_then(|execution| history.evidence.claim(execution.fence?))
                    .map(|claim| claim.at_ms);
                answered.push(operator::Answered {
                    attempt,
                    answer,
                    claimed_ms,
                });
            }
        }
    }
    answered.retain(|answered| !died_with_proxy.contains(&answered.answer));
    // An operator's erase or resolve starts a new segment of the key's answers.
    let changes = key_scope(&executions, history)
        .map_or_else(Vec::new, |scope| operator::shown(history, scope));
    let unknowns: Vec<&Attempt> = attempts
        .iter()
        .filter(own)
        .filter(|attempt| attempt.outcome.problem_code() == Some("operation_unknown"))
        .copied()
        .collect();
    let staleness = Ms::try_from(history.policy.edge_max_staleness_ms).unwrap_or(Ms::MAX);
    let across = operator::across(&changes, &answered, (&unknowns, attempts), staleness);
    let divergent_answers = across.divergent.iter().cloned().collect();

    let mut expected: Vec<(bool, Expected)> = across
        .last
        .iter()
        .map(|(status, body)| {
            let (status, body) = (*status, body.clone());
            (false, Expected::Answer { status, body })
        })
        .collect();
    let since_last_change = changes.last().map_or(Ms::MIN, |change| change.landed_ms);
    // A replay that started within the edge cache's staleness bound after the last change,
    // through an edge that held its answer, may be the record as it was before it
    // (`operator::across`): no promise of the record after the run.
    let seen_last_change = |attempt: &&&Attempt| match &attempt.outcome {
        Outcome::Answered {
            replayed: true,
            status,
            body,
            ..
        } => operator::replay_must_have_seen(
            since_last_change,
            (attempt.envoy, attempt.start_ms),
            (*status, body),
            attempts,
            staleness,
        ),
        _ => attempt.start_ms >= since_last_change,
    };
    // An answer the previous release forgot was never recorded: it does not replay.
    let forgotten = answered_by_the_previous_release(&reruns, &executions);
    let last_segment: Vec<&Attempt> = attempts
        .iter()
        .filter(seen_last_change)
        .filter(|attempt| !forgotten.contains(attempt.id.as_str()))
        .filter(|attempt| !lost_with_proxy.contains(attempt.id.as_str()))
        .copied()
        .collect();
    expected.extend(recorded_non_2xx(&last_segment));
    if across.unknown_since.is_some() {
        let reconciled = executions.first().is_some_and(|execution| {
            history
                .policy
                .reruns(Cause::ServiceAnsweredAbsent, &execution.path)
        });
        expected.push((
            false,
            match reconciled {
                true => Expected::Reconciled,
                false => Expected::Unknown,
            },
        ));
    }
    let conflicted = attempts.iter().any(|attempt| {
        attempt.role == Role::Conflict
            && attempt.outcome.problem_code() == Some("idempotency_conflict")
    });
    if conflicted {
        expected.push((true, Expected::Conflict));
    }
    // An `unknown` record runs again only after an operator erased it or resolved it as
    // failed, or (under `reconcile`) the service answered that its run is fenced out.
    let reconciled: BTreeSet<u64> = reruns
        .iter()
        .filter(|rerun| {
            matches!(
                rerun.verdict,
                RerunVerdict::Excused {
                    row: Row::ReconciledAbsent { .. },
                    ..
                }
            )
        })
        .map(|rerun| rerun.later)
        .collect();
    let ran_after_unknown = executions
        .iter()
        .filter(|execution| !reconciled.contains(&execution.execution))
        .filter(|execution| {
            unknowns.iter().any(|unknown| {
                unknown.end_ms < execution.at_ms
                    && !changes.iter().any(|change| {
                        change.action.frees_the_key()
                            && unknown.end_ms < change.landed_ms
                            && change.landed_ms <= execution.at_ms
                    })
            })
        })
        .map(|execution| execution.execution)
        .collect();

    let checks: Vec<_> = history
        .verifications
        .iter()
        .filter(|check| check.key == key)
        .collect();
    let unverified = expected.iter().any(|(conflict, _)| {
        let mine: Vec<_> = checks.iter().filter(|c| c.conflict == *conflict).collect();
        mine.is_empty() || mine.iter().any(|check| check.outcome.unavailable())
    });
    let lost = checks
        .iter()
        .filter(|check| !check.outcome.unavailable())
        .flat_map(|check| {
            expected
                .iter()
                .filter(|(conflict, _)| *conflict == check.conflict)
                .filter(|(_, want)| !answers(&check.outcome, want))
                .map(|(_, want)| LostRecord {
                    envoy: check.envoy,
                    expected: want.clone(),
                    replay: check.outcome.clone(),
                })
        })
        .collect::<Vec<_>>();
    let lost =
        lost.into_iter()
            .chain(across.unknown_after_resolve.into_iter().map(
                |(envoy, (status, body), replay)| LostRecord {
                    envoy,
                    expected: Expected::Answer { status, body },
                    replay,
                },
            ))
            .collect();

    let certain_doubles = certain_doubles(&reruns, &executions, history);
    KeyVerdict {
        key: key.to_owned(),
        executions: executions.iter().map(|e| e.execution).collect(),
        reruns,
        died_with_proxy: died_with_proxy.into_iter().collect(),
        divergent_answers,
        lost,
        ran_after_unknown,
        certain_doubles,
        unverified,
        faults: key_faults(attempts, &history.faults),
    }
}

/// The scope of a key's record, from the claims of its executions' fences.
fn key_scope<'h>(executions: &[&Execution], history: &'h History) -> Option<&'h str> {
    executions
        .iter()
        .filter_map(|execution| history.evidence.claim(execution.fence?))
        .map(|claim| claim.scope.as_str())
        .next()
}

/// The recorded 3xx and 4xx answers the key's own callers got from the upstream (not the
/// filter's own problem answers).
fn recorded_non_2xx(attempts: &[&Attempt]) -> Vec<(bool, Expected)> {
    let answers: BTreeSet<(u16, String)> = attempts
        .iter()
        .filter(|attempt| attempt.role != Role::Conflict)
        .filter_map(|attempt| match &attempt.outcome {
            Outcome::Answered {
                status,
                body,
                problem_code: None,
                ..
            } if RECORDED_NON_2XX.contains(status) => Some((*status, body.clone())),
            _ => None,
        })
        .collect();
    answers
        .into_iter()
        .map(|(status, body)| (false, Expected::Answer { status, body }))
        .collect()
}

/// Whether a check's `outcome` is what the record must answer.
fn answers(outcome: &Outcome, want: &Expected) -> bool {
    match (outcome, want) {
        (Outcome::Answered { status, body, .. }, Expected::Answer { status: s, body: b }) => {
            status == s && body == b
        }
        (
            Outcome::Answered {
                problem_code: None, ..
            },
            Expected::Reconciled,
        ) => true,
        (Outcome::Answered { status: 409, .. }, Expected::Unknown) => {
            outcome.problem_code() == Some("operation_unknown")
        }
        (Outcome::Answered { status: 409, .. }, Expected::Conflict) => {
            outcome.problem_code() == Some("idempotency_conflict")
        }
        _ => false,
    }
}

/// Judges execution `later` of a key against the execution just before it, `earlier`.
/// Excused only when every condition of one row is shown:
///
/// 1. both carry a fence, the re-run's higher, and the same body (any body after an erase,
///    4., which frees the key for any request);
/// 2. the store logged both claims, in one scope, with the same fingerprint (but after an
///    erase);
/// 3. every claim of that scope after the earlier one's successor, up to the re-run's, won
///    by taking over an expired lease ([`TAKEOVER`]) — never a reuse, a way of winning
///    this judge does not know, or a fresh insert (the record vanished) unless the claim
///    before it is shown released unrun ([`chain_holds`]);
/// 4. or an operator erased the record after the earlier claim, and the first claim after
///    the erase inserted a fresh record, with the chain from there holding
///    ([`operator::erased`]);
///    or resolved the `unknown` record as failed after the earlier claim and before any
///    later one, and the first claim after the resolve took the failed record over, with the
///    chain from there holding ([`operator::resolved_failed`]);
///    or, under `uncertain: reconcile`, the service's own log shows it answered `absent`
///    about the earlier fence (or a higher one) before the re-run started, and the first
///    claim after that answer took the failed record over, with the chain from there
///    holding ([`reconciled_absent`]);
/// 5. either the earlier claim was settled by a release that lets a retry run again
///    ([`settled_row`]: the upstream's own answer or an uncertain outcome under
///    `uncertain: retry` called for it, and the successor won only as that release
///    allows), or: the successor took the lease over, no settle of the earlier claim landed
///    (store or proxy) before it, and the row's own event is shown: the earlier
///    execution's Envoy was killed (or drained and sent `SIGTERM`) after its claim was won
///    and before both the takeover and any landed settle (if its caller had the answer by
///    then, the hand-off to the outbox must be in its log) — or it retired a root context
///    with that claim's settle call in its outbox and a module push then destroyed that VM
///    before the takeover and any landed settle, or a hot restart's parent logged that
///    retirement as it exited, before both (`lifecycle.rs`) — or it was cut off from every
///    lease-store until its lease ran out, the stores and Postgres healthy (`partition.rs`) — or its outbox logged giving
///    the claim up before the takeover, its retry budget spent — never on a key the plan
///    guards with `uncertain: hold`, nor when a lease taken over was claimed at-most-once,
///    or taken over by a claim that was, nor before the lease ran out from its last renew,
///    nor after a caller was replayed the record (`takeover.rs`).
pub fn judge_rerun(
    earlier: &Execution,
    later: &Execution,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> RerunVerdict {
    match excused(earlier, later, attempts_by_id, history) {
        Ok(verdict) => verdict,
        Err(reason) => RerunVerdict::Unexcused { reason },
    }
}

fn excused(
    earlier: &Execution,
    later: &Execution,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<RerunVerdict, String> {
    let evidence = &history.evidence;
    let (n, m) = (earlier.execution, later.execution);
    let (Some(earlier_fence), Some(later_fence)) = (earlier.fence, later.fence) else {
        return Err(format!("execution {n} or {m} carries no fence"));
    };
    if later_fence <= earlier_fence {
        return Err(format!(
            "the re-run's fence {later_fence} is not above the earlier {earlier_fence}"
        ));
    }
    let claim = |fence: u64| {
        evidence
            .claim(fence)
            .ok_or_else(|| format!("no lease-store logged the claim of fence {fence}"))
    };
    let (first, last) = (claim(earlier_fence)?, claim(later_fence)?);
    let another_scope = || {
        format!(
            "fences {earlier_fence} and {later_fence} were won for another scope or fingerprint"
        )
    };
    if first.scope != last.scope {
        return Err(another_scope());
    }
    let between = evidence.claims_between(&first.scope, earlier_fence, later_fence);
    let Some(takeover) = between.first().copied() else {
        return Err(format!(
            "no claim after fence {earlier_fence} in its scope was logged"
        ));
    };
    // An erase frees the key for any request (`docs/guarantee.md#operator-changes`): the
    // re-run may carry another body, which found no record to conflict with.
    let erased = operator::erased(first, &between, history)?;
    if erased.is_none() {
        if earlier.body_sha256 != later.body_sha256 {
            return Err(format!(
                "the re-run sent another body ({} after {})",
                later.body_sha256, earlier.body_sha256
            ));
        }
        if first.fingerprint != last.fingerprint {
            return Err(another_scope());
        }
    }
    let freeing_row = match erased {
        Some(found) => Some(found),
        None => match operator::resolved_failed(first, &between, history)? {
            Some(found) => Some(found),
            None => reconciled_absent((earlier, later), first, &between, history)?,
        },
    };
    if let Some((row, successor)) = freeing_row {
        return Ok(RerunVerdict::Excused {
            row,
            envoy: earlier.via.unwrap_or_default(),
            earlier_fence,
            takeover_fence: successor.fence,
            later_fence,
        });
    }
    chain_holds(&between, history)?;
    if let Some(row) = settled_row(earlier, first, takeover, attempts_by_id, history)? {
        let envoy = earlier.via.unwrap_or_default();
        return Ok(RerunVerdict::Excused {
            row,
            envoy,
            earlier_fence,
            takeover_fence: takeover.fence,
            later_fence,
        });
    }
    if takeover.how != TAKEOVER {
        return Err(format!(
            "fence {} won by `{}`, not by taking over an expired lease",
            takeover.fence, takeover.how
        ));
    }
    at_most_once_takeover(earlier, first, &between, history)?;
    let (row, envoy) = lost_with_its_proxy(earlier, first, takeover, attempts_by_id, history)?;
    Ok(RerunVerdict::Excused {
        row,
        envoy,
        earlier_fence,
        takeover_fence: takeover.fence,
        later_fence,
    })
}

/// The row that shows `earlier`'s claim `first` lost with its proxy before `until` (the
/// takeover of its lease, or the moment a store held its lapse): no settle of it landed
/// (store or proxy) before, and its Envoy was killed or drained, retired the VM holding
/// it, was cut off from every lease-store until its lease ran out, or its outbox gave it up. With
/// the row, the Envoy.
fn lost_with_its_proxy(
    earlier: &Execution,
    first: &ClaimWon,
    until: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<(Row, usize), String> {
    let evidence = &history.evidence;
    let earlier_fence = first.fence;
    let takeover = until;
    let landed = evidence.first_landed(first);
    if let Some(landed) = landed.filter(|at| *at <= takeover.at_ms) {
        return Err(format!(
            "a settle of fence {earlier_fence} landed at {landed} ms, before the takeover \
             (fence {}) at {} ms",
            takeover.fence, takeover.at_ms
        ));
    }
    if let Some(replayed) = replayed_before(earlier, first, takeover, attempts_by_id, history) {
        return Err(format!(
            "a caller of the key got the record replayed at {replayed} ms, before the takeover \
             (fence {}) at {} ms: fence {earlier_fence}'s record had landed",
            takeover.fence, takeover.at_ms
        ));
    }
    lease_ran_out(first, takeover, history)?;
    let Some(envoy) = earlier.via else {
        return Err(format!(
            "execution {} does not say which Envoy forwarded it",
            earlier.execution
        ));
    };
    let earlier_facts = Earlier {
        execution: earlier,
        envoy,
        claim: first,
        landed,
    };
    if let Some(row) = proxy_died(&earlier_facts, takeover, attempts_by_id, history)? {
        return Ok((row, envoy));
    }
    if let Some(row) = parent_exited(&earlier_facts, takeover, attempts_by_id, history)? {
        return Ok((row, envoy));
    }
    if let Some(row) = vm_retired(&earlier_facts, takeover, attempts_by_id, history) {
        return Ok((row, envoy));
    }
    if let Some(row) = proxy_partitioned(&earlier_facts, takeover, attempts_by_id, history)? {
        return Ok((row, envoy));
    }
    let gave_up = evidence.proxy_event(envoy, earlier_fence, "given_up");
    if let Some(given_up) = gave_up.filter(|given_up| given_up.at_ms < takeover.at_ms) {
        gave_up_after_its_budget(given_up, history)?;
        return Ok((Row::OutboxGaveUp, envoy));
    }
    Err(format!(
        "envoy-{envoy}, which won fence {earlier_fence} at {} ms, was neither killed nor cut \
         off from the lease-stores before the takeover at {} ms{} and logged no give-up of \
         it; {}",
        first.at_ms,
        takeover.at_ms,
        landed.map_or(String::new(), |at| format!(" or the settle at {at} ms")),
        faults_between(history, first.at_ms, takeover.at_ms)
    ))
}

/// The faults active at some point of `[from, to]`, said for a finding: what the reader of
/// a failed run looks at first.
fn faults_between(history: &History, from: Ms, to: Ms) -> String {
    let active: Vec<String> = history
        .faults
        .iter()
        .filter(|fault| fault.overlaps(from, to))
        .map(|fault| {
            format!(
                "fault {} ({}, target {}) from {} to {} ms",
                fault.id,
                fault.kind.name(),
                fault.target,
                fault.start_ms,
                fault.end_ms
            )
        })
        .collect();
    match active.is_empty() {
        true => "no fault was active meanwhile".to_owned(),
        false => format!("faults active meanwhile: {}", active.join(", ")),
    }
}

/// Under a hold policy a lost proxy's claim is held `unknown`, not re-run: the answer of
/// `execution`, if its caller had it, is excused from replaying when a store held its
/// claim's lapse and one row of the guarantee table shows the proxy lost before that
/// (`docs/guarantee.md#at-most-once-and-at-least-once-policies`). Never under `reconcile`,
/// where the service's `committed` answer settles the held record with it.
fn answer_lost_to_a_held_lapse(
    execution: &Execution,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> bool {
    let evidence = &history.evidence;
    let Some(fence) = execution.fence else {
        return false;
    };
    // Under `reconcile` the service settles the held record with that answer: it replays.
    if history
        .policy
        .reruns(Cause::ServiceAnsweredAbsent, &execution.path)
    {
        return false;
    }
    let (Some(claim), Some(held)) = (evidence.claim(fence), evidence.lapse_held(fence)) else {
        return false;
    };
    let at_the_hold = ClaimWon {
        at_ms: held.at_ms,
        how: "held".to_owned(),
        ..claim.clone()
    };
    lost_with_its_proxy(execution, claim, &at_the_hold, attempts_by_id, history)
        .is_ok_and(|(row, _)| row.answer_lost_with_proxy())
}

/// The claims after the earlier one's successor, up to the re-run's: each must have won
/// by taking over an expired lease ([`TAKEOVER`]), or by a fresh insert (`claimed`) made
/// after the claim before it was released unrun ([`released_unrun`]): a `won` answered too
/// late to keep its lease is never forwarded and its release deletes the record
/// (`docs/stream-machine.md#the-claim`). An orphan takeover's release gives the record
/// back instead (`leaves=failed`, `docs/records.md#orphan-claims`): a fresh insert after it
/// means the record was lost.
pub(super) fn chain_holds(between: &[&ClaimWon], history: &History) -> Result<(), String> {
    for pair in between.windows(2) {
        let (before, claim) = (pair[0], pair[1]);
        if claim.how == TAKEOVER {
            continue;
        }
        let not_a_takeover = format!(
            "fence {} won by `{}`, not by taking over an expired lease",
            claim.fence, claim.how
        );
        if claim.how != "claimed" {
            return Err(not_a_takeover);
        }
        let released = released_unrun(before, history)
            .map_err(|why| format!("{not_a_takeover}, and fence {}: {why}", before.fence))?;
        if released.leaves.as_deref() == Some("failed") {
            return Err(format!(
                "{not_a_takeover}, though fence {}'s release gave the record back (`failed`): \
                 the record was lost",
                before.fence
            ));
        }
        if claim.at_ms < freed_from(&released) {
            return Err(format!(
                "{not_a_takeover}, at {} ms, before fence {}'s release at {} ms",
                claim.at_ms,
                before.fence,
                applied_ms(&released)
            ));
        }
    }
    Ok(())
}

/// When `claim` was released as never run: its proxy logged it not forwarded, a store
/// applied its `release_forget`, and the upstream's log holds no execution with its fence.
/// `Err` says which of these is not shown.
fn released_unrun(claim: &ClaimWon, history: &History) -> Result<Release, String> {
    if let Some(ran) = history
        .executions
        .iter()
        .chain(&history.verification_executions)
        .find(|execution| execution.fence == Some(claim.fence))
    {
        return Err(format!("the upstream ran it (execution {})", ran.execution));
    }
    history.evidence.released_unforwarded(claim)
}

/// The dead-proxy row: `Ok(None)` when no kill or drain's `SIGTERM` fits, `Err` when one fits but the caller
/// had its answer with no hand-off logged (the record should have been written).
fn proxy_died(
    earlier: &Earlier<'_>,
    takeover: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let before = earlier.deadline(takeover);
    let Earlier {
        execution: earlier,
        envoy,
        claim,
        ..
    } = *earlier;
    let Some((kill, ended)) = history
        .faults
        .iter()
        .filter(|fault| fault.target == envoy)
        .filter_map(|fault| Some((fault, process_ended(fault)?)))
        .find(|(_, ended)| claim.at_ms <= *ended && *ended < before)
    else {
        return Ok(None);
    };
    let Some(answered) = answered_by(earlier, attempts_by_id, ended) else {
        return Ok(Some(Row::ProxyDied {
            fault: kill.id,
            answer_delivered: false,
        }));
    };
    if !handed_off_by(history, envoy, claim.fence, ended) {
        return Err(format!(
            "envoy-{envoy} was killed at {ended} ms, after its caller got the answer at \
             {answered} ms, but logged no hand-off of fence {}: its record should have been \
             written",
            claim.fence
        ));
    }
    Ok(Some(Row::ProxyDied {
        fault: kill.id,
        answer_delivered: true,
    }))
}

/// The rows in which the earlier claim was settled by a release that lets a retry run
/// again: `Ok(None)` when no store applied such a release of `claim`; `Err` when one did
/// but the row's conditions are not all shown.
///
/// - `release_forget`: the upstream answered the earlier execution a status the policy
///   forgets, and `successor` inserted a fresh record (`claimed`) after the release
///   ([`SETTLE_LOG_SLACK_MS`]).
/// - `release_cooldown`: the upstream answered a `5xx`, `408` or `429`, or (under
///   `uncertain: retry` only) reset the connection, or its caller got no answer (gave up,
///   or its connection was closed); and
///   `successor` took the failed record over ([`TAKEOVER`]) no earlier than the cooldown
///   after the release ([`SETTLE_LOG_SLACK_MS`]).
fn settled_row(
    earlier: &Execution,
    claim: &ClaimWon,
    successor: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let fence = claim.fence;
    let Some(release) = history
        .evidence
        .release(claim, &["release_forget", "release_cooldown"])?
    else {
        return Ok(None);
    };
    let answered = earlier.answered;
    let shown = |status: Option<u16>| status.map_or("no status".to_owned(), |s| s.to_string());
    if release.call == "release_forget" {
        let previous = previous_release_forgot(history, earlier);
        let forgets = |s: &u16| history.policy.forget_statuses.contains(s) || previous.is_some();
        let Some(status) = answered.filter(forgets) else {
            return Err(format!(
                "fence {fence} was released as forget, but the upstream answered {}, which \
                 the policy records",
                shown(answered)
            ));
        };
        if took_the_pending_lease_over(successor, &release) {
            return Ok(None);
        }
        if successor.how != "claimed" || successor.at_ms < freed_from(&release) {
            return Err(format!(
                "fence {} won by `{}` at {} ms, not by a fresh insert after the forget of \
                 fence {fence} at {} ms",
                successor.fence,
                successor.how,
                successor.at_ms,
                applied_ms(&release)
            ));
        }
        return Ok(Some(match previous {
            Some(fault) if !history.policy.forget_statuses.contains(&status) => {
                Row::ForgottenByThePreviousRelease { status, fault }
            }
            _ => Row::Forgotten { status },
        }));
    }
    if took_the_pending_lease_over(successor, &release) {
        return Ok(None);
    }
    let retry = history
        .policy
        .reruns(Cause::UncertainOutcome, &earlier.path);
    let no_answer = earlier
        .caller_request_id
        .as_deref()
        .and_then(|id| attempts_by_id.get(id))
        .is_some_and(|attempt| attempt.answered_at().is_none());
    let cause = match answered {
        Some(status @ (408 | 429 | 500..=599)) => CooldownCause::RetryableStatus(status),
        _ if retry && earlier.reset => CooldownCause::UpstreamReset,
        _ if retry && no_answer => CooldownCause::CallerGotNoAnswer,
        _ => {
            return Err(format!(
                "fence {fence} was released as a failure, but the upstream answered {}{}",
                shown(answered),
                match retry {
                    true => " and its outcome was not uncertain",
                    false => " under `uncertain: hold`",
                }
            ));
        }
    };
    let cooldown = Ms::try_from(history.policy.failure_cooldown_ms).unwrap_or(Ms::MAX);
    let cooled = match release.stamps {
        // The database's own times: the takeover needed the cooldown's end.
        Some(DbStamps {
            applied_ms,
            cooldown_ends_ms: Some(ends),
        }) => {
            if ends - applied_ms < cooldown - STAMP_ROUNDING_MS {
                return Err(format!(
                    "fence {fence} cooled down for {} ms, not the policy's {cooldown} ms",
                    ends - applied_ms
                ));
            }
            ends - STAMP_ROUNDING_MS
        }
        Some(DbStamps {
            cooldown_ends_ms: None,
            ..
        }) => {
            return Err(format!(
                "fence {fence}'s release as cooldown names no end of the cooldown"
            ));
        }
        // A store that predates the stamps: from its log line, or from a caller told the
        // record was cooling down before the line.
        None => {
            let released = cooling_seen_by(earlier, claim, successor, attempts_by_id)
                .map_or(release.logged_ms, |seen| seen.min(release.logged_ms));
            released.saturating_add(cooldown) - SETTLE_LOG_SLACK_MS
        }
    };
    if successor.how != TAKEOVER || successor.at_ms < cooled {
        return Err(format!(
            "fence {} won by `{}` at {} ms, not by a takeover after the cooldown of fence \
             {fence} released at {} ms",
            successor.fence,
            successor.how,
            successor.at_ms,
            applied_ms(&release)
        ));
    }
    Ok(Some(Row::Cooldown { cause }))
}

/// The earliest a claim that needed `release`'s commit may be logged: the database's stamp
/// (less rounding), or — from a store that predates the stamps — its first line less
/// [`SETTLE_LOG_SLACK_MS`].
fn freed_from(release: &Release) -> Ms {
    match release.stamps {
        Some(stamps) => stamps.applied_ms - STAMP_ROUNDING_MS,
        None => release.logged_ms - SETTLE_LOG_SLACK_MS,
    }
}

/// When `release` was applied, as best known: its stamp, or its first line.
fn applied_ms(release: &Release) -> Ms {
    release
        .stamps
        .map_or(release.logged_ms, |stamps| stamps.applied_ms)
}

/// When a caller of the key was told the record is cooling down (`503
/// retryable_cooldown`: the store read it `failed`) by a request that started after
/// `claim` was won and ended before `successor`: the release of `claim` had committed by
/// then, even when the store logged it later (its first line lost or late: a store frozen
/// between the commit and the log).
fn cooling_seen_by(
    earlier: &Execution,
    claim: &ClaimWon,
    successor: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
) -> Option<Ms> {
    attempts_by_id
        .values()
        .filter(|attempt| earlier.key.as_deref() == Some(attempt.key.as_str()))
        .filter(|attempt| attempt.outcome.problem_code() == Some("retryable_cooldown"))
        .filter(|attempt| claim.at_ms < attempt.start_ms && attempt.end_ms < successor.at_ms)
        .map(|attempt| attempt.end_ms)
        .min()
}

/// Whether `successor` took the earlier claim's lease over while it was still `pending`:
/// before `release` landed (its outbox delivered it late, or as a repeat). Then the release
/// settled nothing, and the takeover is judged by the other rows (a dead or cut-off proxy,
/// an outbox that gave up).
fn took_the_pending_lease_over(successor: &ClaimWon, release: &Release) -> bool {
    successor.how == TAKEOVER && successor.at_ms < applied_ms(release)
}

/// When `execution`'s caller received its answer, if it did by `limit`.
pub(super) fn answered_by(
    execution: &Execution,
    attempts_by_id: &HashMap<&str, &Attempt>,
    limit: Ms,
) -> Option<Ms> {
    execution
        .caller_request_id
        .as_deref()
        .and_then(|id| attempts_by_id.get(id))
        .and_then(|attempt| attempt.answered_at())
        .filter(|answered| *answered <= limit)
}

/// Whether Envoy `envoy` logged handing `fence`'s record to its outbox by `limit`.
pub(super) fn handed_off_by(history: &History, envoy: usize, fence: u64, limit: Ms) -> bool {
    history
        .evidence
        .proxy_event(envoy, fence, "handoff")
        .is_some_and(|handoff| handoff.at_ms <= limit)
}
