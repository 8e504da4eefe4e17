//! Certain doubles (`docs/guarantee.md#at-most-once-and-at-least-once-policies`): on a key
//! the run's plan guards with a policy that never runs an operation twice (`uncertain:
//! hold` or `reconcile`), a re-run whose earlier execution is known to have committed ran
//! the operation twice for certain, whatever else is said of the re-run. Known from the
//! upstream, never from keyflight: its log shows the earlier execution answered a status
//! the policy records — not a failure after which the policy lets a retry run again (a
//! `5xx`, `408` or `429`, a status it forgets, or a `303` the previous release forgot) — or
//! its payments ledger holds the earlier run's payment. Each is counted apart from the
//! re-runs a policy admits, and fails the run. A re-run an operator's erase or resolve as
//! failed let in is not one (the operator asked for it), nor one the upstream's own
//! failure status let in (the policy admits it, whatever the upstream did before
//! answering it).

use keyflight_filter::config::Uncertain;
use keyflight_filter::guarantee;

use super::lifecycle::previous_release_forgot;
use super::verdict::{Rerun, RerunVerdict};
use crate::history::{Execution, History};

/// The re-runs (their execution numbers) among `reruns` that are certain doubles.
pub fn certain_doubles(reruns: &[Rerun], executions: &[&Execution], history: &History) -> Vec<u64> {
    reruns
        .iter()
        .filter(|rerun| !admitted_whatever_committed(rerun))
        .filter(|rerun| {
            executions
                .iter()
                .find(|execution| execution.execution == rerun.earlier)
                .is_some_and(|earlier| committed_at_most_once(earlier, history))
        })
        .map(|rerun| rerun.later)
        .collect()
}

/// Let in by a cause the guarantee's table lets run again under every `uncertain` setting
/// (an operator, or a failure status the upstream answered the earlier run): whatever the
/// earlier run committed, the re-run was allowed.
fn admitted_whatever_committed(rerun: &Rerun) -> bool {
    let RerunVerdict::Excused { row, .. } = rerun.verdict else {
        return false;
    };
    Uncertain::ALL
        .into_iter()
        .all(|uncertain| guarantee::reruns(row.cause(), uncertain))
}

/// Whether the plan guards `execution`'s path with an at-most-once policy and the upstream
/// shows it committed: it answered a status the policy records, or its ledger holds its
/// payment.
fn committed_at_most_once(execution: &Execution, history: &History) -> bool {
    history.policy.held_at_most_once(&execution.path)
        && (answered_a_recorded_status(execution, history) || paid(execution, history))
}

fn answered_a_recorded_status(execution: &Execution, history: &History) -> bool {
    let Some(status) = execution.answered else {
        return false;
    };
    let retryable = matches!(status, 408 | 429 | 500..=599);
    let forgotten = history.policy.forget_statuses.contains(&status)
        || previous_release_forgot(history, execution).is_some();
    (200..500).contains(&status) && !retryable && !forgotten
}

fn paid(execution: &Execution, history: &History) -> bool {
    match (&history.ledger, execution.scope.as_deref(), execution.fence) {
        (Some(ledger), Some(scope), Some(fence)) => ledger.paid(scope, fence),
        _ => false,
    }
}
