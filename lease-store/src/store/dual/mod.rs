//! Claims across a recipe change: one claim, two scopes
//! (`docs/records.md#claims-across-a-recipe-change`).
//!
//! While a policy names its previous recipe, the filter sends the request's identity under
//! both recipes in one claim ([`PreviousIdentity`]). The store claims both scopes in ONE
//! transaction, pipelined (`BEGIN`, [`CLAIM_SQL`] on each scope in byte order, the
//! [`BOTH_HELD_SQL`] check, `COMMIT`), so both rows are won under one `claim_id` or neither
//! is: the check fails the transaction unless both claims won, and the `COMMIT` then rolls
//! it back. Every statement is sent before the first answer is awaited, so a caller that
//! goes away cannot leave a transaction open on a pooled connection. Rows are locked in
//! byte order of their scopes, the order group commit locks in too (`batch/claims.rs`), so
//! dual claimers and batches never deadlock; a single-scope claimer locks one row. On a
//! partitioned database, where the two scopes may live on two partitions, the claim takes
//! them in turn instead ([`across_partitions`]).
//!
//! An at-most-once claim that meets a lapsed lease on either scope holds it as `unknown`
//! (`claim.rs`); the transaction that did so then rolls back (the claim did not win both),
//! so the lapse is held again on its own, after it ([`HOLD_LAPSED_SQL`]).
//!
//! A claim that did not win both reads both records and answers from whichever decides
//! ([`decide`]): another fingerprint under either recipe is a conflict, a completed record
//! under either is replayed, a running one is followed. A proxy still on the old recipe
//! finds a normal record under its own scope and needs nothing new.
//!
//! The two records then share every settle: a renew, finalize or release naming
//! `previous_scope` runs its fenced statement on both scopes in one pipelined transaction
//! ([`settle_both`]), and lands when the claim holds one record or both and no other
//! claim holds the other.
//!
//! When the two recipes give one scope (only the fingerprint changed), there is one
//! record: a claim that meets the other recipe's fingerprint there is that request's
//! record, not a conflict, so the claim runs again with that fingerprint.

use std::time::Instant;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimResponse, PreviousIdentity};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use deadpool_postgres::Object;
use tokio_postgres::Statement;

use super::claim::{
    CLAIM_SQL, ClaimParams, HOLD_LAPSED_SQL, MAX_ATTEMPTS, READ_SQL, held, won_attempt,
};
use super::lease::{Written, run_written};
use super::orphan::OrphanGuard;
use super::snapshot::RecordSnapshot;
use super::{ClaimAttempt, Store, StoreError};

mod across_partitions;

pub(super) use across_partitions::settle_in_turn;
pub use keyflight_store_core::sql::dual::{BOTH_HELD_SQL, NONE_TAKEN_SQL};

impl Store {
    /// A claim that carries the previous recipe's identity: both scopes, or one scope
    /// under either fingerprint when the recipes agree on the scope.
    pub(super) async fn claim_dual(
        &self,
        scope: &Digest,
        params: &ClaimParams,
        previous: &PreviousIdentity,
    ) -> Result<ClaimAttempt, StoreError> {
        if previous.scope == *scope {
            let attempt = self.claim_single(scope, params).await?;
            if attempt.response != ClaimResponse::Conflict
                || previous.fingerprint == params.fingerprint
            {
                return Ok(attempt);
            }
            let under_previous = ClaimParams {
                fingerprint: previous.fingerprint,
                ..params.clone()
            };
            return self.claim_single(scope, &under_previous).await;
        }
        match self.partitioned() {
            true => self.claim_in_turn(scope, params, previous).await,
            false => self.claim_both(scope, params, previous).await,
        }
    }

    /// [`CLAIM_SQL`] on both scopes in one transaction; when it did not win both, the
    /// records' answer ([`decide`]).
    async fn claim_both(
        &self,
        scope: &Digest,
        params: &ClaimParams,
        previous: &PreviousIdentity,
    ) -> Result<ClaimAttempt, StoreError> {
        let Identities {
            current,
            older,
            in_byte_order: [first, second],
        } = Identities::of(scope, params, previous);
        let held_until = self.takeovers_held_until();
        let may_take_over = held_until.is_none();
        self.run(async |client| {
            let claim = client.prepare_cached(CLAIM_SQL).await?;
            let check = client.prepare_cached(BOTH_HELD_SQL).await?;
            let read = client.prepare_cached(READ_SQL).await?;
            let hold = client.prepare_cached(HOLD_LAPSED_SQL).await?;
            for _ in 0..MAX_ATTEMPTS {
                let claim_id = Uuid::now_v7();
                let guards = [
                    OrphanGuard::new(self, first.0, claim_id),
                    OrphanGuard::new(self, second.0, claim_id),
                ];
                let (first_scope, first_fp) = (first.0.0.as_slice(), first.1.0.as_slice());
                let (second_scope, second_fp) = (second.0.0.as_slice(), second.1.0.as_slice());
                let claim_row = async |scope: &&[u8], fingerprint: &&[u8]| {
                    let params: [&(dyn ToSql + Sync); 8] = [
                        scope,
                        fingerprint,
                        &claim_id,
                        &params.lease_ms_sql,
                        &params.retention_ms,
                        &may_take_over,
                        &params.at_most_once,
                        &params.workload.as_deref(),
                    ];
                    client.query_opt(&claim, &params).await
                };
                let check_params: [&(dyn ToSql + Sync); 3] =
                    [&first_scope, &second_scope, &claim_id];
                let sent = Instant::now();
                let (begin, won_first, won_second, _both, commit) = futures_util::join!(
                    client.batch_execute("BEGIN"),
                    claim_row(&first_scope, &first_fp),
                    claim_row(&second_scope, &second_fp),
                    client.query_opt(&check, &check_params),
                    client.batch_execute("COMMIT"),
                );
                begin?;
                let (won_first, won_second) = (won_first?, won_second?);
                // A lapse held in the transaction rolled back with it: hold it on its own.
                for (row, (scope, fingerprint)) in [(&won_first, &first), (&won_second, &second)] {
                    let hold_params: [&(dyn ToSql + Sync); 4] = [
                        &scope.0.as_slice(),
                        &fingerprint.0.as_slice(),
                        &may_take_over,
                        &params.at_most_once,
                    ];
                    if let Some(row) = row
                        && held(row)?
                        && let Some(held) = client.query_opt(&hold, &hold_params).await?
                    {
                        self.lapses_held.inc();
                        crate::evidence::lapse_held(scope, held.try_get("fence")?);
                    }
                }
                let won_first = won_first.filter(|row| !held(row).unwrap_or(true));
                let won_second = won_second.filter(|row| !held(row).unwrap_or(true));
                let both = won_first.is_some() && won_second.is_some();
                if both {
                    // Committed or not is unknown until COMMIT answers: the guards
                    // release the claim if it did and the answer is lost.
                    commit?;
                }
                for guard in guards {
                    guard.delivered();
                }
                if let (Some(first_row), Some(second_row)) = (&won_first, &won_second) {
                    let row = if first.0 == *scope {
                        first_row
                    } else {
                        second_row
                    };
                    return won_attempt(row, claim_id, params.lease_ms, sent);
                }
                if let Some(attempt) =
                    answer_from_records(client, &read, current, older, held_until).await?
                {
                    return Ok(attempt);
                }
            }
            Ok(come_back_shortly())
        })
        .await
    }
}

/// The request's identity under both recipes, `(scope, fingerprint)` each.
struct Identities {
    current: (Digest, Digest),
    older: (Digest, Digest),
    /// Both, in the byte order of their scopes: the order every claim takes them in.
    in_byte_order: [(Digest, Digest); 2],
}

impl Identities {
    fn of(scope: &Digest, params: &ClaimParams, previous: &PreviousIdentity) -> Identities {
        let current = (*scope, params.fingerprint);
        let older = (previous.scope, previous.fingerprint);
        let in_byte_order = if current.0 <= older.0 {
            [current, older]
        } else {
            [older, current]
        };
        Identities {
            current,
            older,
            in_byte_order,
        }
    }
}

/// A dual claim that found both records winnable [`MAX_ATTEMPTS`] times, and won neither:
/// the caller comes back shortly.
fn come_back_shortly() -> ClaimAttempt {
    ClaimAttempt {
        response: ClaimResponse::InProgress { retry_after_s: 1 },
        pending_until: None,
        record_expires_at: None,
        statement_sent: None,
    }
}

/// The answer to a dual claim that did not win both records, from what both records say
/// now ([`decide`]); `None` when both may be won (the claim runs again).
async fn answer_from_records(
    client: &Object,
    read: &Statement,
    current: (Digest, Digest),
    older: (Digest, Digest),
    held_until: Option<Instant>,
) -> Result<Option<ClaimAttempt>, StoreError> {
    let (current_scope, older_scope) = (current.0.0.as_slice(), older.0.0.as_slice());
    let (current_param, older_param): ([&(dyn ToSql + Sync); 1], [&(dyn ToSql + Sync); 1]) =
        ([&current_scope], [&older_scope]);
    let (current_row, older_row) = futures_util::try_join!(
        client.query_opt(read, &current_param),
        client.query_opt(read, &older_param),
    )?;
    let current_record = current_row
        .as_ref()
        .map(RecordSnapshot::from_row)
        .transpose()?;
    let older_record = older_row
        .as_ref()
        .map(RecordSnapshot::from_row)
        .transpose()?;
    let answers = [
        answer_of(current_record.as_ref(), &current.1)?,
        answer_of(older_record.as_ref(), &older.1)?,
    ];
    if let Some(attempt) = decide(answers) {
        return Ok(Some(attempt));
    }
    // An expired lease this replica may not take over yet (takeover.rs).
    let pending = [&current_record, &older_record]
        .into_iter()
        .any(|record| record.as_ref().is_some_and(RecordSnapshot::is_pending));
    Ok(match held_until {
        Some(until) if pending => Some(super::claim::held_in_progress(until)),
        _ => None,
    })
}

/// Runs a fenced settle `statement` on `scope` and on `previous` in one pipelined
/// transaction; answers the rows it changed on both. It lands when the claim holds one
/// record or both, and no other claim holds the other ([`NONE_TAKEN_SQL`]): during a
/// namespace transition a claim made through a replica on the shared namespace holds only
/// that one (`docs/configuration.md#switching-to-the-mesh-identity`). `params` holds the
/// statement's parameters after the scope (`$2`…), the claim id first.
pub(super) async fn settle_both(
    client: &Object,
    statement: &tokio_postgres::Statement,
    scope: &Digest,
    previous: &Digest,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Written, StoreError> {
    let on = async |scope: &Digest| {
        let scope = scope.0.as_slice();
        let mut all: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(params.len() + 1);
        all.push(&scope);
        all.extend_from_slice(params);
        run_written(client, statement, &all).await
    };
    // Byte order, as the claim locks them.
    let (first, second) = if scope <= previous {
        (scope, previous)
    } else {
        (previous, scope)
    };
    let check = client.prepare_cached(NONE_TAKEN_SQL).await?;
    let (first_scope, second_scope) = (first.0.as_slice(), second.0.as_slice());
    let claim_id = params.first().copied().ok_or(StoreError::Invalid(
        "a settle names its claim id first".into(),
    ))?;
    let check_params: [&(dyn ToSql + Sync); 3] = [&first_scope, &second_scope, claim_id];
    let (begin, first_written, second_written, none_taken, commit) = futures_util::join!(
        client.batch_execute("BEGIN"),
        on(first),
        on(second),
        client.query_opt(&check, &check_params),
        client.batch_execute("COMMIT"),
    );
    begin?;
    let (first_written, second_written) = (first_written?, second_written?);
    if let Err(e) = none_taken {
        if e.code() != Some(&SqlState::DIVISION_BY_ZERO) {
            return Err(e.into());
        }
        // Rolled back: the caller reads who holds the records (a repeat, or a lost lease).
        commit?;
        return Ok(Written::default());
    }
    commit?;
    // The stamps of the record the claim was made under, when it changed.
    Ok(match first == scope {
        true => first_written.and(second_written),
        false => second_written.and(first_written),
    })
}

/// What a record (or its absence) tells a claimant with `fingerprint` that did not win.
fn answer_of(
    record: Option<&RecordSnapshot>,
    fingerprint: &Digest,
) -> Result<Option<ClaimAttempt>, StoreError> {
    record.map_or(Ok(None), |record| record.answer_for(fingerprint))
}

/// The answer to a dual claim that did not win, from the answers of its two records
/// (`None`: absent or winnable). The record that says most about the request decides:
/// another body under either recipe is a conflict; a recorded outcome is replayed; an
/// uncertain one waits for an operator; a running one is followed; a cooldown holds.
/// `None` when both may be won: the claim runs again.
pub(super) fn decide(answers: [Option<ClaimAttempt>; 2]) -> Option<ClaimAttempt> {
    fn rank(response: &ClaimResponse) -> u8 {
        match response {
            ClaimResponse::Conflict => 0,
            ClaimResponse::Completed { .. } | ClaimResponse::NotReplayable => 1,
            ClaimResponse::Unknown { .. } => 2,
            ClaimResponse::InProgress { .. } => 3,
            ClaimResponse::Cooldown { .. } => 4,
            ClaimResponse::Won { .. } => 5,
        }
    }
    answers
        .into_iter()
        .flatten()
        .min_by_key(|attempt| rank(&attempt.response))
}

#[cfg(test)]
mod tests {
    use keyflight_protocol::wire::StoredResponse;

    use super::*;

    fn attempt(response: ClaimResponse) -> Option<ClaimAttempt> {
        Some(ClaimAttempt {
            response,
            pending_until: None,
            record_expires_at: None,
            statement_sent: None,
        })
    }

    fn decided(a: Option<ClaimAttempt>, b: Option<ClaimAttempt>) -> Option<ClaimResponse> {
        let forward = decide([a.clone(), b.clone()]).map(|a| a.response);
        assert_eq!(forward, decide([b, a]).map(|a| a.response), "order-free");
        forward
    }

    #[test]
    fn the_record_that_says_most_decides_whichever_scope_holds_it() {
        let completed = ClaimResponse::Completed {
            response: StoredResponse::new(201, Vec::new(), b"ok"),
        };
        let running = ClaimResponse::InProgress { retry_after_s: 3 };
        let cooling = ClaimResponse::Cooldown { retry_after_s: 3 };
        assert_eq!(decided(None, None), None);
        assert_eq!(
            decided(None, attempt(running.clone())),
            Some(running.clone())
        );
        assert_eq!(
            decided(attempt(running.clone()), attempt(completed.clone())),
            Some(completed.clone())
        );
        assert_eq!(
            decided(attempt(completed), attempt(ClaimResponse::Conflict)),
            Some(ClaimResponse::Conflict)
        );
        assert_eq!(
            decided(attempt(cooling), attempt(running.clone())),
            Some(running)
        );
        assert_eq!(
            decided(attempt(ClaimResponse::Unknown { fence: Some(3) }), None),
            Some(ClaimResponse::Unknown { fence: Some(3) })
        );
    }
}
