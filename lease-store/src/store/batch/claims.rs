//! A batch of claims: every fresh scope in one `INSERT`, everything else alone.
//!
//! [`CLAIM_BATCH_SQL`] is, row for row, the `ins` branch of the single claim
//! statement (`claim.rs`): the same columns, the same per-row lease and
//! retention from `clock_timestamp()`, a fence from `nextval()` per row, and
//! `ON CONFLICT (scope) DO NOTHING`. A row it returns won exactly as `ins`
//! would have (`claimed`). A call whose row it did not insert — the record
//! exists (settled, pending, conflicting) or a concurrent claim inserted it
//! first — is answered "run singly" and takes the unchanged single path:
//! the claim statement, then the read. So every answer other than a fresh
//! win, and the argument that N concurrent claims on one scope have one
//! winner, are the single path's (`docs/group-commit.md`).
//!
//! Lock order: the rows are inserted in scope order, in every batch, so two
//! batches that touch the same fresh scopes wait for each other in one
//! direction only. A batch that still deadlocks (with a transaction outside
//! the store) runs its calls singly, as after any failure of the whole batch
//! ([`Store::claim_singly_after`]).
//!
//! The takeover grace does not apply: the batch only inserts fresh rows and
//! never takes a lease over, nor holds a lapsed one (a fresh row carries its
//! claim's `at_most_once`, and the single path holds its lapse). A row it won for a caller that gave up meanwhile is
//! an orphan, released at once (`store/orphan.rs`).

use std::time::Instant;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimResponse, WonHow};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{BatchKind, Item, Queues};
use crate::log_limit::{self, Kind};
use crate::store::claim::ClaimParams;
use crate::store::orphan::OrphanRelease;
use crate::store::{ClaimAttempt, Store, StoreError};

pub(in crate::store) use keyflight_store_core::routed::CLAIM_BATCH;

/// A queued claim.
pub(in crate::store) struct ClaimItem {
    scope: Digest,
    params: ClaimParams,
    reply: oneshot::Sender<ClaimReply>,
}

/// What a batch tells a queued claim.
pub(in crate::store) enum ClaimReply {
    /// The answer: the batch won it, or ran it alone, or failed as a whole.
    Answered(Result<ClaimAttempt, StoreError>),
    /// Take the single path (the scope was not fresh, or may not share the batch).
    RunSingly,
    /// Take the single path after a batch that failed as a whole, whose claim on the scope
    /// (`batch_claim`) was released or not found, but may still land late
    /// ([`Store::claim_singly_after`]).
    RunSinglyAfterFailure { batch_claim: Uuid },
}

impl Item for ClaimItem {
    fn scope(&self) -> &Digest {
        &self.scope
    }

    fn bytes(&self) -> usize {
        0
    }

    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run_singly(self) {
        let _gone = self.reply.send(ClaimReply::RunSingly);
    }
}

impl ClaimItem {
    /// Tells its caller to take the single path after its failed batch (`batch_claim`).
    fn run_singly_after_failure(self, batch_claim: Uuid) {
        let _gone = self
            .reply
            .send(ClaimReply::RunSinglyAfterFailure { batch_claim });
    }

    /// Answers the caller; a claim won for a caller that already gave up is an orphan,
    /// logged won and released at once (its statement committed: `store/orphan.rs`).
    fn answer(self, store: &Store, answer: Result<ClaimAttempt, StoreError>) {
        if let Err(ClaimReply::Answered(Ok(orphan))) = self.reply.send(ClaimReply::Answered(answer))
        {
            store.orphan_claimed(self.scope, &self.params, &orphan.response);
        }
    }
}

impl Queues {
    /// Queues a claim and waits for what its batch says.
    pub(in crate::store) async fn claim(&self, scope: Digest, params: ClaimParams) -> ClaimReply {
        let (reply, answer) = oneshot::channel();
        let item = ClaimItem {
            scope,
            params,
            reply,
        };
        self.claims
            .submit(item, answer, self.bound)
            .await
            .unwrap_or_else(|e| ClaimReply::Answered(Err(e)))
    }
}

impl Store {
    /// Runs one batch of claims taken off the queue (on a handle without queues).
    pub(super) async fn run_claim_batch(&self, mut batch: Vec<ClaimItem>) {
        self.batch_sizes.observe(BatchKind::Claim, batch.len());
        if batch.len() == 1 {
            // Alone: exactly the single path, on this worker.
            for item in batch {
                let answer = self.claim_single(&item.scope, &item.params).await;
                item.answer(self, answer);
            }
            return;
        }
        batch.sort_by_key(|item| item.scope);
        let claim_ids: Vec<Uuid> = batch.iter().map(|_| Uuid::now_v7()).collect();
        let inserted = self
            .run(async |client| {
                let statement = client.prepare_cached(self.sql(&CLAIM_BATCH)).await?;
                let scopes: Vec<&[u8]> = batch.iter().map(|i| i.scope.0.as_slice()).collect();
                let fingerprints: Vec<&[u8]> = batch
                    .iter()
                    .map(|i| i.params.fingerprint.0.as_slice())
                    .collect();
                let leases: Vec<i64> = batch.iter().map(|i| i.params.lease_ms_sql).collect();
                let retentions: Vec<i64> = batch.iter().map(|i| i.params.retention_ms).collect();
                let at_most_once: Vec<bool> = batch.iter().map(|i| i.params.at_most_once).collect();
                let workloads: Vec<Option<&str>> =
                    batch.iter().map(|i| i.params.workload.as_deref()).collect();
                let sent = Instant::now();
                let rows = client
                    .query(
                        &statement,
                        &[
                            &scopes,
                            &fingerprints,
                            &claim_ids,
                            &leases,
                            &retentions,
                            &at_most_once,
                            &workloads,
                        ],
                    )
                    .await?;
                let mut won = Vec::with_capacity(rows.len());
                for row in &rows {
                    let scope: &[u8] = row.try_get("scope")?;
                    won.push((scope.to_vec(), row.try_get::<_, i64>("fence")?));
                }
                Ok((won, sent))
            })
            .await;
        match inserted {
            Ok((won, sent)) => {
                let mut fences: Vec<Option<i64>> = vec![None; batch.len()];
                for (scope, fence) in won {
                    if let Ok(at) = batch.binary_search_by(|i| i.scope.0.as_slice().cmp(&scope)) {
                        fences[at] = Some(fence);
                    }
                }
                for ((item, claim_id), fence) in batch.into_iter().zip(claim_ids).zip(fences) {
                    match fence {
                        Some(fence) => {
                            let lease_ms = item.params.lease_ms;
                            item.answer(
                                self,
                                Ok(ClaimAttempt {
                                    response: ClaimResponse::Won {
                                        claim_id,
                                        fence,
                                        how: WonHow::Claimed,
                                        lease_ms,
                                    },
                                    pending_until: None,
                                    record_expires_at: None,
                                    statement_sent: Some(sent),
                                }),
                            );
                        }
                        None => item.run_singly(),
                    }
                }
            }
            Err(e) => self.claim_singly_after(batch, claim_ids, e).await,
        }
    }

    /// After a batch that failed as a whole (`batch/mod.rs`): each call alone, once the
    /// batch's own claim on its scope is surely gone.
    ///
    /// The batch may have committed anyway, wholly (its answer was lost) or, on a
    /// partitioned database, in part: each partition commits its share, so one
    /// partition's deadlock or outage fails the statement after the others committed.
    /// Nobody holds the claim ids the batch drew, so whatever it won is an orphan,
    /// released by claim id first (`store/orphan.rs`); each call then runs alone, and one
    /// partition's failure is the answer only of the calls whose scopes it owns. A call
    /// whose release could not reach its database gets that error, and the release goes
    /// on in the background; one whose release found nothing is looked at once more when
    /// the batch is surely over, in case it committed late. A partition's share can land
    /// after the router answered another's failure (PL/Proxy does not wait for it): the
    /// caller then meets its own batch's claim alone, and gives it back first
    /// (`Store::claim`).
    async fn claim_singly_after(
        &self,
        batch: Vec<ClaimItem>,
        claim_ids: Vec<Uuid>,
        error: StoreError,
    ) {
        if let Some(suppressed) = log_limit::global().admit(Kind::BatchFailed) {
            tracing::info!(error = %error, calls = batch.len(), suppressed, "claim batch failed; releasing what it may have won and running its calls singly");
        }
        let settled_by = Instant::now() + self.answer_timeout;
        // A batch only inserts fresh records (`claimed`), so what it may have won is deleted.
        let release = OrphanRelease::Delete;
        let released = futures_util::future::join_all(batch.iter().zip(&claim_ids).map(
            async |(item, claim_id)| {
                match item.abandoned() {
                    true => None,
                    false => Some(
                        self.release_orphan_once(&item.scope, *claim_id, release)
                            .await,
                    ),
                }
            },
        ))
        .await;
        for ((item, claim_id), released) in batch.into_iter().zip(claim_ids).zip(released) {
            match released {
                Some(Ok(Some(fence))) => {
                    self.orphan_released(&item.scope, claim_id, fence, release);
                    item.run_singly_after_failure(claim_id);
                }
                Some(Ok(None)) => {
                    self.release_orphan_if_late(item.scope, claim_id, settled_by);
                    item.run_singly_after_failure(claim_id);
                }
                Some(Err(e)) => {
                    self.release_orphan(item.scope, claim_id, settled_by, release);
                    item.answer(self, Err(e));
                }
                None => self.release_orphan(item.scope, claim_id, settled_by, release),
            }
        }
    }
}
