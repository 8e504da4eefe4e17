//! L1: claiming a scope in one committed statement, and explaining a lost claim.
//!
//! [`CLAIM_SQL`] is one statement of four CTEs, raced on Postgres 15
//! (`docs/records.md#the-claim-statement`, `docs/postgres-facts.md#concurrency-of-the-claim`):
//! of N concurrent claims exactly one wins.
//!
//! * `ins` inserts a fresh `pending` row; `ON CONFLICT DO NOTHING` makes every
//!   concurrent inserter but one wait for the winner's commit and then skip.
//! * `ttl` reuses a record past its retention, whatever its fingerprint — but
//!   never a `pending` row whose lease is still live, and never an `unknown`
//!   row (an uncertain outcome waits for an operator, `docs/records.md#operators`).
//! * `steal` takes over, **with the same fingerprint only**, a `pending` row
//!   whose lease ran out (crashed winner; when neither its claim nor this one is
//!   at-most-once) or a `failed` row whose cooldown elapsed. Concurrent stealers
//!   serialize on the row lock and Postgres re-checks the predicate on the new
//!   row version, so one wins.
//! * `held` makes such a lapsed lease `unknown` instead when its claim was
//!   at-most-once, or this claim is (`steal` never takes one): nobody wins, and
//!   the read that follows answers `unknown` like any other (`held_lapse`, `keyflight_store_core::sql::claim`).
//!
//! All lease math uses `clock_timestamp()` (which advances during the
//! statement), not `now()`, so waiting on a row lock cannot mint an
//! already-expired lease. Every branch draws a fresh `fence` from the
//! sequence (L2). A claim that returns no row lost; a second statement
//! ([`READ_SQL`]) reads the record to say why. The two statements are not one
//! transaction: if the row changed in between (settled, expired, cleaned up),
//! the claim simply runs again, a bounded number of times.
//!
//! The read is also available on its own as an owned [`RecordSnapshot`]
//! (`snapshot.rs`, `watch.rs`): a long-poll follower re-checks with it (after marking the
//! record watched), one snapshot shared by every waiter on the scope, and only
//! runs the claim statement when [`RecordSnapshot::answer_for`] says the
//! record may be winnable (see `crate::longpoll`). Both paths map a record to an answer
//! with the same function, so they cannot disagree.
//!
//! Portability (L9): plain `INSERT … ON CONFLICT` and data-modifying CTEs, no
//! advisory locks or `SKIP LOCKED`.

use std::sync::Arc;
use std::time::Instant;

use keyflight_protocol::Digest;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, WonHow};
use keyflight_store_core::answer::retry_after_s;
use tokio::sync::oneshot;
use tokio_postgres::Row;
use uuid::Uuid;

use super::batch::ClaimReply;
use super::orphan::{OrphanGuard, OrphanRelease};
use super::snapshot::RecordSnapshot;
use super::{ClaimAttempt, Store, StoreError, duration_millis, millis_param};
pub(super) use keyflight_store_core::sql::claim::READ_SQL;
pub use keyflight_store_core::sql::claim::{CLAIM_SQL, HOLD_LAPSED_SQL};

pub(super) use keyflight_store_core::routed::CLAIM;

pub(super) use keyflight_store_core::routed::READ;

/// How many times a claim re-runs when the record changes between the claim
/// and the read. Each re-run needs a concurrent transition, so a handful is
/// plenty; past it the caller is told to come back shortly.
pub(super) const MAX_ATTEMPTS: usize = 4;

/// A claim's validated numbers, as the SQL binds them.
#[derive(Debug, Clone)]
pub(super) struct ClaimParams {
    pub(super) fingerprint: Digest,
    /// The lease asked for, echoed to a winner.
    pub(super) lease_ms: u64,
    /// The same, as the statement's `bigint`.
    pub(super) lease_ms_sql: i64,
    /// The record's retention (the claim's, or the store's default).
    pub(super) retention_ms: i64,
    /// A lapsed lease of this claim is held as `unknown`, not taken over.
    pub(super) at_most_once: bool,
    /// The workload a record this claim inserts is counted to; `None` for a bearer caller.
    pub(super) workload: Option<Arc<str>>,
}

impl Store {
    /// Makes ONE claim attempt on `scope` (no waiting): wins the lease, or
    /// reports the state that won instead.
    ///
    /// With group commit on, the claim first goes through a batch
    /// (`batch/claims.rs`): a fresh scope may be won there, together with
    /// other claims queued at the same moment; any other outcome comes from
    /// the single path below, as without batching. A claim that names the previous
    /// recipe's identity is never batched (`dual/`).
    pub async fn claim(
        &self,
        scope: &Digest,
        req: &ClaimRequest,
    ) -> Result<ClaimAttempt, StoreError> {
        self.claim_as(scope, req, None).await
    }

    /// [`Store::claim`] for a workload: a record it inserts is counted to `workload`
    /// (`docs/records.md#storage-quota`).
    pub async fn claim_as(
        &self,
        scope: &Digest,
        req: &ClaimRequest,
        workload: Option<&Arc<str>>,
    ) -> Result<ClaimAttempt, StoreError> {
        let params = self.claim_params(req, workload)?;
        if let Some(previous) = &req.previous {
            return self.claim_dual(scope, &params, previous).await;
        }
        if let Some(queues) = &self.batch {
            match queues.claim(*scope, params.clone()).await {
                ClaimReply::Answered(answer) => return answer,
                ClaimReply::RunSingly => {}
                ClaimReply::RunSinglyAfterFailure { batch_claim } => {
                    return self
                        .claim_after_failed_batch(scope, &params, batch_claim)
                        .await;
                }
            }
        }
        self.claim_single_to_the_end(*scope, params).await
    }

    /// The single path in a task of its own, as a settle runs: when the caller goes away
    /// while the statement runs (its proxy reset the call, or died), the statement's answer
    /// is still read, and a claim it won is an orphan known by how it won
    /// ([`Store::orphan_claimed`]) rather than one its guard releases blind.
    async fn claim_single_to_the_end(
        &self,
        scope: Digest,
        params: ClaimParams,
    ) -> Result<ClaimAttempt, StoreError> {
        let (reply, answer) = oneshot::channel();
        let store = self.clone();
        tokio::spawn(async move {
            let attempt = store.claim_single(&scope, &params).await;
            if let Err(Ok(orphan)) = reply.send(attempt) {
                store.orphan_claimed(scope, &params, &orphan.response);
            }
        });
        answer.await.unwrap_or_else(|failed| {
            Err(StoreError::Unavailable(format!(
                "the claim call failed: {failed}"
            )))
        })
    }

    /// A claim answered to a caller that went away: when it won, an orphan, logged won (a
    /// takeover, say, which a judge must see to follow the record's claims) and released
    /// at once, its statement having committed: a takeover gives the record back, any
    /// other win deletes it (`store/orphan.rs`).
    pub(super) fn orphan_claimed(
        &self,
        scope: Digest,
        params: &ClaimParams,
        response: &ClaimResponse,
    ) {
        if let ClaimResponse::Won { claim_id, how, .. } = response {
            crate::evidence::claim_won(&scope, &params.fingerprint, params.at_most_once, response);
            self.release_orphan(scope, *claim_id, Instant::now(), OrphanRelease::after(*how));
        }
    }

    /// The single path after a batch that failed as a whole. When it finds the record
    /// running, that may be the batch's own claim, landed after the batch was answered
    /// (`batch/claims.rs`): nobody holds it, so it is released (a fresh insert: deleted) and
    /// the claim runs again.
    async fn claim_after_failed_batch(
        &self,
        scope: &Digest,
        params: &ClaimParams,
        batch_claim: Uuid,
    ) -> Result<ClaimAttempt, StoreError> {
        let attempt = self.claim_single(scope, params).await?;
        if !matches!(attempt.response, ClaimResponse::InProgress { .. }) {
            return Ok(attempt);
        }
        match self
            .release_orphan_once(scope, batch_claim, OrphanRelease::Delete)
            .await
        {
            Ok(Some(fence)) => {
                self.orphan_released(scope, batch_claim, fence, OrphanRelease::Delete);
                self.claim_single(scope, params).await
            }
            Ok(None) | Err(_) => Ok(attempt),
        }
    }

    /// Lapsed at-most-once leases this store held as `unknown` (`/metrics`).
    pub fn lapses_held(&self) -> u64 {
        self.lapses_held.get()
    }

    /// The counter behind [`Store::lapses_held`], for the metrics registry.
    pub fn lapses_held_counter(&self) -> prometheus_client::metrics::counter::Counter {
        self.lapses_held.clone()
    }

    /// Checks a claim's numbers and fills in the default retention.
    fn claim_params(
        &self,
        req: &ClaimRequest,
        workload: Option<&Arc<str>>,
    ) -> Result<ClaimParams, StoreError> {
        if req.lease_ms == 0 {
            return Err(StoreError::Invalid("lease_ms must be positive".into()));
        }
        let lease_ms_sql = millis_param("lease_ms", req.lease_ms)?;
        let retention_ms = match req.retention_s {
            // A zero retention makes the record reclaimable the moment it
            // completes: retries would run the operation again, not replay it.
            Some(0) => {
                return Err(StoreError::Invalid(
                    "retention_s must be positive: a zero retention replays nothing".into(),
                ));
            }
            Some(s) => s
                .checked_mul(1000)
                .and_then(|ms| i64::try_from(ms).ok())
                .ok_or_else(|| StoreError::Invalid("retention_s is out of range".into()))?,
            None => duration_millis(self.default_retention),
        };
        // A record kept for less than its lease may be reclaimable the moment it completes:
        // a retry would run the operation again instead of replaying it.
        if u64::try_from(retention_ms).is_ok_and(|retention| retention < req.lease_ms) {
            return Err(StoreError::Invalid(format!(
                "the record's retention ({} ms: retention_s, or the store's \
                 --default-retention) must be at least lease_ms ({} ms): a record that \
                 completes after its retention would run again instead of replaying",
                retention_ms, req.lease_ms
            )));
        }
        Ok(ClaimParams {
            fingerprint: req.fingerprint,
            lease_ms: req.lease_ms,
            lease_ms_sql,
            retention_ms,
            at_most_once: req.at_most_once,
            workload: workload.cloned(),
        })
    }

    /// The single path: [`CLAIM_SQL`], and when it lost, [`READ_SQL`] to say why.
    pub(super) async fn claim_single(
        &self,
        scope: &Digest,
        params: &ClaimParams,
    ) -> Result<ClaimAttempt, StoreError> {
        let ClaimParams {
            fingerprint,
            lease_ms,
            lease_ms_sql,
            retention_ms,
            at_most_once,
            ref workload,
        } = *params;
        let held_until = self.takeovers_held_until();
        let may_take_over = held_until.is_none();
        self.run(async |client| {
            let claim = client.prepare_cached(self.sql(&CLAIM)).await?;
            let read = client.prepare_cached(self.sql(&READ)).await?;
            for _ in 0..MAX_ATTEMPTS {
                let claim_id = Uuid::now_v7();
                let guard = OrphanGuard::new(self, *scope, claim_id);
                let sent = Instant::now();
                let won = client
                    .query_opt(
                        &claim,
                        &[
                            &scope.0.as_slice(),
                            &fingerprint.0.as_slice(),
                            &claim_id,
                            &lease_ms_sql,
                            &retention_ms,
                            &may_take_over,
                            &at_most_once,
                            &workload.as_deref(),
                        ],
                    )
                    .await?;
                guard.delivered();
                if let Some(row) = won {
                    if !held(&row)? {
                        return won_attempt(&row, claim_id, lease_ms, sent);
                    }
                    self.lapses_held.inc();
                    crate::evidence::lapse_held(scope, row.try_get("fence")?);
                }
                let existing = client.query_opt(&read, &[&scope.0.as_slice()]).await?;
                let snapshot = existing
                    .as_ref()
                    .map(RecordSnapshot::from_row)
                    .transpose()?;
                let Some(record) = snapshot else { continue };
                if let Some(attempt) = record.answer_for(&fingerprint)? {
                    return Ok(attempt);
                }
                // An expired lease this replica may not take over yet: its winner may
                // be alive with the record in its outbox. In progress until the grace
                // ends; a long-poll waiter wakes then and claims again.
                if let Some(until) = held_until
                    && record.is_pending()
                {
                    return Ok(held_in_progress(until));
                }
            }
            Ok(ClaimAttempt {
                response: ClaimResponse::InProgress { retry_after_s: 1 },
                pending_until: None,
                record_expires_at: None,
                statement_sent: None,
            })
        })
        .await
    }
}

/// `in_progress` until the takeover grace ends at `until`, when a waiter claims again.
pub(super) fn held_in_progress(until: Instant) -> ClaimAttempt {
    let left = until.saturating_duration_since(Instant::now());
    ClaimAttempt {
        response: ClaimResponse::InProgress {
            retry_after_s: retry_after_s(millis(left)),
        },
        pending_until: Some(until),
        record_expires_at: None,
        statement_sent: None,
    }
}

/// Whether a row [`CLAIM_SQL`] returned is its `held` branch: a lapse held as
/// `unknown`, not a win.
pub(super) fn held(row: &Row) -> Result<bool, StoreError> {
    Ok(row.try_get::<_, &str>("how")? == "held")
}

pub(super) fn won_attempt(
    row: &Row,
    claim_id: Uuid,
    lease_ms: u64,
    sent: Instant,
) -> Result<ClaimAttempt, StoreError> {
    Ok(ClaimAttempt {
        response: ClaimResponse::Won {
            claim_id,
            fence: row.try_get("fence")?,
            how: won_how(row)?,
            lease_ms,
        },
        pending_until: None,
        record_expires_at: None,
        statement_sent: Some(sent),
    })
}

/// How the claim statement's row `how` won.
pub(super) fn won_how(row: &Row) -> Result<WonHow, StoreError> {
    Ok(match row.try_get::<_, &str>("how")? {
        "claimed" => WonHow::Claimed,
        "recovered_ttl" => WonHow::RecoveredTtl,
        _ => WonHow::RecoveredAbandoned,
    })
}
