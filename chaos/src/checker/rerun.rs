//! The judgement of one re-run: excused only when every condition of one row of the
//! guarantee table is shown, from the evidence (`evidence.rs`) rather than from time
//! windows ([`judge_rerun`]). The rows a settle's release opens are in `settled.rs`, a lost
//! proxy's in `lifecycle.rs` and `partition.rs`, an operator's in `operator.rs`, the
//! service's `absent` in `reconcile.rs`.

use std::collections::HashMap;

use super::evidence::{ClaimWon, Release, TAKEOVER};
use super::lifecycle::{parent_exited, process_ended, vm_retired};
use super::operator;
use super::partition::{Earlier, proxy_partitioned};
use super::reconcile::reconciled_absent;
use super::settled::{applied_ms, freed_from, settled_row};
use super::takeover::{
    at_most_once_takeover, gave_up_after_its_budget, lease_ran_out, replayed_before,
};
use super::verdict::{RerunVerdict, Row};
use crate::history::{Attempt, Execution, History, Ms};

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
pub(super) fn judge_rerun(
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
pub(super) fn lost_with_its_proxy(
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
pub(super) fn released_unrun(claim: &ClaimWon, history: &History) -> Result<Release, String> {
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
