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

use keyflight_filter::guarantee::Cause;

use super::doubles::certain_doubles;
use super::evidence::ClaimWon;
use super::lifecycle::answered_by_the_previous_release;
use super::operator;
use super::report::key_faults;
use super::rerun::{judge_rerun, lost_with_its_proxy};
use super::verdict::{Expected, KeyVerdict, LostRecord, Rerun, RerunVerdict, Row};
use crate::history::{Attempt, Execution, History, Ms, Outcome, Role};

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
    // failed, or (under `reconcile`) the service answered that its run is fenced out: a run
    // the reconciled-absent row excused, started after the caller saw `unknown`, shows the
    // record freed by then; the runs after it are held to their own rows.
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
    let freed_by_the_service: Vec<Ms> = executions
        .iter()
        .filter(|execution| reconciled.contains(&execution.execution))
        .map(|execution| execution.at_ms)
        .collect();
    let ran_after_unknown = executions
        .iter()
        .filter(|execution| {
            unknowns.iter().any(|unknown| {
                unknown.end_ms < execution.at_ms
                    && !changes.iter().any(|change| {
                        change.action.frees_the_key()
                            && unknown.end_ms < change.landed_ms
                            && change.landed_ms <= execution.at_ms
                    })
                    && !freed_by_the_service
                        .iter()
                        .any(|&at| unknown.end_ms < at && at <= execution.at_ms)
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
