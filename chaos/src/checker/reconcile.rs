//! `uncertain: reconcile` (`docs/reconcile.md`): a key whose outcome was uncertain runs
//! again only on the service's word that the earlier run is fenced out, never on what the
//! filter or a lease-store say about the question.
//!
//! The word is the upstream's own: its reconcile log (`GET /effects/ledger`, kept by the
//! demo upstream as it answers, after the ledger's transaction committed) holds an `absent`
//! answer about the earlier fence, or a higher one, given before the re-run's handler
//! started. The store then settles the `unknown` record as failed, and the re-run's claim
//! takes that record over: the first claim after the earlier one must be that takeover,
//! won after the answer, with the chain from there holding. Whether the earlier run had
//! committed after all is not this row's to say: the ledger's payments decide it, and a
//! re-run after a committed run is a certain double whatever excused it (`doubles.rs`).

use keyflight_filter::guarantee::Cause;

use super::evidence::{ClaimWon, STAMP_ROUNDING_MS, TAKEOVER};
use super::rerun::chain_holds;
use super::verdict::Row;
use crate::history::{Execution, History};

/// The row that excuses `later` after `earlier` under `uncertain: reconcile`, with the
/// claim that took the record over: `Ok(None)` when the plan does not guard the key with
/// `reconcile` or the service never answered `absent` about `earlier`'s fence before
/// `later` started (another row may still apply); `Err` when it did, but the claims that
/// followed do not show the record freed by it.
pub fn reconciled_absent<'a>(
    (earlier, later): (&Execution, &Execution),
    first: &ClaimWon,
    between: &[&'a ClaimWon],
    history: &History,
) -> Result<Option<(Row, &'a ClaimWon)>, String> {
    if !history
        .policy
        .reruns(Cause::ServiceAnsweredAbsent, &earlier.path)
    {
        return Ok(None);
    }
    let (Some(ledger), Some(scope)) = (&history.ledger, earlier.scope.as_deref()) else {
        return Ok(None);
    };
    let Some(answer) = ledger
        .fenced_out(scope, first.fence)
        .filter(|answer| answer.at_ms <= later.at_ms)
    else {
        return Ok(None);
    };
    let Some(successor) = between.first().copied() else {
        return Err(format!(
            "the service answered `absent` about fence {} at {} ms, but no claim after fence \
             {} was logged",
            answer.asked_fence, answer.at_ms, first.fence
        ));
    };
    if successor.at_ms + STAMP_ROUNDING_MS < answer.at_ms {
        return Err(format!(
            "fence {} was won at {} ms, before the service answered `absent` about fence {} \
             at {} ms",
            successor.fence, successor.at_ms, answer.asked_fence, answer.at_ms
        ));
    }
    if successor.how != TAKEOVER {
        return Err(format!(
            "fence {} won by `{}` after the service answered `absent` at {} ms, not by taking \
             the failed record over",
            successor.fence, successor.how, answer.at_ms
        ));
    }
    chain_holds(between, history)?;
    Ok(Some((
        Row::ReconciledAbsent {
            asked_fence: answer.asked_fence,
            answered_ms: answer.at_ms,
        },
        successor,
    )))
}
