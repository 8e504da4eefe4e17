//! Certain doubles (`docs/guarantee.md#at-most-once-and-at-least-once-policies`): on a key
//! the run's plan guards with a policy that never runs an operation twice (`uncertain:
//! hold`; `reconcile` would join it), a re-run whose earlier execution the upstream's own
//! log shows committed — it answered a status the policy records, not a failure after which
//! the policy lets a retry run again (a `5xx`, `408` or `429`, a status it forgets, or a
//! `303` the previous release forgot) — ran the operation twice for certain, whatever else
//! is said of the re-run. Each is counted apart from the re-runs a policy admits, and fails
//! the run. A re-run an operator's erase or resolve as failed let in is not one: the
//! operator asked for it.

use super::judgement::{Rerun, RerunVerdict, Row};
use super::lifecycle::previous_release_forgot;
use crate::history::{Execution, History};

/// The re-runs (their execution numbers) among `reruns` that are certain doubles.
pub fn certain_doubles(reruns: &[Rerun], executions: &[&Execution], history: &History) -> Vec<u64> {
    reruns
        .iter()
        .filter(|rerun| !let_in_by_an_operator(rerun))
        .filter(|rerun| {
            executions
                .iter()
                .find(|execution| execution.execution == rerun.earlier)
                .is_some_and(|earlier| committed_under_hold(earlier, history))
        })
        .map(|rerun| rerun.later)
        .collect()
}

fn let_in_by_an_operator(rerun: &Rerun) -> bool {
    matches!(
        rerun.verdict,
        RerunVerdict::Excused {
            row: Row::OperatorErased { .. } | Row::OperatorResolvedFailed { .. },
            ..
        }
    )
}

/// Whether the plan guards `execution`'s path with `uncertain: hold` and the upstream's log
/// shows it answered a status the policy records.
fn committed_under_hold(execution: &Execution, history: &History) -> bool {
    let Some(status) = execution.answered else {
        return false;
    };
    let retryable = matches!(status, 408 | 429 | 500..=599);
    let forgotten = history.policy.forget_statuses.contains(&status)
        || previous_release_forgot(history, execution).is_some();
    history.policy.held_at_most_once(&execution.path)
        && (200..500).contains(&status)
        && !retryable
        && !forgotten
}
