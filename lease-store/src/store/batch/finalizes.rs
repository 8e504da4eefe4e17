//! A batch of finalizes: one `UPDATE` for every record still owned, the
//! follow-up read for each one that was not.
//!
//! [`FINALIZE_BATCH_SQL`] is, row for row, the single `FINALIZE_SQL`
//! (`lease.rs`): the same `SET`, fenced by the same `WHERE scope AND claim_id
//! AND state = 'pending'`. A scope it returns landed now. A call whose scope
//! it did not return matched no owned row: its caller runs the single path's
//! follow-up (`settled`: the owner read, after the batch committed), which
//! tells a repeat (success) from a lost lease — the same statement, the same
//! answer as alone.
//!
//! The settle triggers (migrations V1/V3) are `FOR EACH ROW`, so every watched
//! record the batch settles sends its own `NOTIFY` at the batch's commit.
//!
//! Lock order: the statement joins the sorted arrays to the table; two
//! batches can only meet on one scope when a finalize is repeated, and if
//! their plans lock rows in different orders and deadlock, the batch runs its
//! calls singly, as after any failure of the whole batch.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::FinalizeRequest;
use tokio::sync::oneshot;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::{BatchKind, Item, Queues};
use crate::log_limit::{self, Kind};
use crate::store::{Store, StoreError};

pub(in crate::store) use keyflight_store_core::routed::FINALIZE_BATCH;

/// A queued finalize.
pub(in crate::store) struct FinalizeItem {
    scope: Digest,
    request: FinalizeRequest,
    reply: oneshot::Sender<FinalizeReply>,
}

/// What a batch tells a queued finalize.
pub(in crate::store) enum FinalizeReply {
    /// The answer: landed in the batch, or ran alone, or the batch failed as a whole.
    Answered(Result<(), StoreError>),
    /// The batch matched no row owned by this claim: a repeat or a lost lease;
    /// the caller reads the owner to tell which.
    NotOwned,
    /// Take the single path; the request comes back for it.
    RunSingly(FinalizeRequest),
}

impl Item for FinalizeItem {
    fn scope(&self) -> &Digest {
        &self.scope
    }

    fn bytes(&self) -> usize {
        let headers: usize = self
            .request
            .response
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        self.request.response.body.len() + headers
    }

    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run_singly(self) {
        let _gone = self.reply.send(FinalizeReply::RunSingly(self.request));
    }
}

impl FinalizeItem {
    fn answer(self, answer: FinalizeReply) {
        let _gone = self.reply.send(answer);
    }
}

impl Queues {
    /// Queues a finalize and waits for what its batch says.
    pub(in crate::store) async fn finalize(
        &self,
        scope: Digest,
        request: FinalizeRequest,
    ) -> FinalizeReply {
        let (reply, answer) = oneshot::channel();
        let item = FinalizeItem {
            scope,
            request,
            reply,
        };
        self.finalizes
            .submit(item, answer, self.bound)
            .await
            .unwrap_or_else(|e| FinalizeReply::Answered(Err(e)))
    }
}

impl Store {
    /// Runs one batch of finalizes taken off the queue (on a handle without queues).
    pub(super) async fn run_finalize_batch(&self, mut batch: Vec<FinalizeItem>) {
        self.batch_sizes.observe(BatchKind::Finalize, batch.len());
        if batch.len() == 1 {
            // Alone: exactly the single path, on this worker.
            for item in batch {
                let answer = self.finalize_single(&item.scope, &item.request).await;
                item.answer(FinalizeReply::Answered(answer));
            }
            return;
        }
        batch.sort_by_key(|item| item.scope);
        let updated = self
            .run(async |client| {
                let statement = client.prepare_cached(self.sql(&FINALIZE_BATCH)).await?;
                let scopes: Vec<&[u8]> = batch.iter().map(|i| i.scope.0.as_slice()).collect();
                let claim_ids: Vec<Uuid> = batch.iter().map(|i| i.request.claim_id).collect();
                let statuses: Vec<i32> = batch
                    .iter()
                    .map(|i| i32::from(i.request.response.status))
                    .collect();
                let headers: Vec<Json<&Vec<(String, String)>>> = batch
                    .iter()
                    .map(|i| Json(&i.request.response.headers))
                    .collect();
                let bodies: Vec<&[u8]> = batch
                    .iter()
                    .map(|i| i.request.response.body.as_slice())
                    .collect();
                let replayable: Vec<bool> = batch.iter().map(|i| i.request.replayable).collect();
                let rows = client
                    .query(
                        &statement,
                        &[
                            &scopes,
                            &claim_ids,
                            &statuses,
                            &headers,
                            &bodies,
                            &replayable,
                        ],
                    )
                    .await?;
                let mut landed = Vec::with_capacity(rows.len());
                for row in &rows {
                    let scope: &[u8] = row.try_get("scope")?;
                    landed.push(scope.to_vec());
                }
                Ok(landed)
            })
            .await;
        match updated {
            Ok(landed) => {
                let mut owned = vec![false; batch.len()];
                for scope in landed {
                    if let Ok(at) = batch.binary_search_by(|i| i.scope.0.as_slice().cmp(&scope)) {
                        owned[at] = true;
                    }
                }
                for (item, owned) in batch.into_iter().zip(owned) {
                    item.answer(if owned {
                        FinalizeReply::Answered(Ok(()))
                    } else {
                        FinalizeReply::NotOwned
                    });
                }
            }
            // A batch that failed as a whole (`batch/mod.rs`) may have landed, wholly or
            // (on a partitioned database, where each partition commits its share) in
            // part. A finalize is fenced and the repeat of a landed one succeeds, so each
            // call simply runs alone: one partition's failure is the answer only of the
            // calls whose scopes it owns.
            Err(e) => {
                if let Some(suppressed) = log_limit::global().admit(Kind::BatchFailed) {
                    tracing::info!(error = %e, calls = batch.len(), suppressed, "finalize batch failed; running its calls singly");
                }
                batch.into_iter().for_each(Item::run_singly);
            }
        }
    }
}
