//! L5: deleting records past their retention, one bounded batch at a time.
//!
//! What expires: `completed` and `failed` rows past retention, and `pending`
//! rows past retention whose lease ran out more than the *settle horizon* ago
//! — a crashed winner whose key is never retried would otherwise leave its row
//! forever. A `pending` row whose lease ran out more recently is kept: its
//! winner may be alive, cut off by an outage, with the record in its outbox,
//! and that record must find the row (`docs/records.md#retention-and-cleanup`).
//! For the same reason a replica in its takeover grace deletes no `pending` row
//! at all, exactly as its claims take none over. A `pending` row with a live
//! lease is kept whatever its age (its owner is still working), and `unknown`
//! rows never expire: they wait for an operator (an uncertain
//! outcome must not silently become "never ran") and are kept until resolved
//! or erased. Deleting a `pending` row that a follower
//! watches fires the `keyflight_settled` NOTIFY (the trigger of migrations V1
//! and V3), so a long-poll waiter wakes and claims the now-empty scope.
//!
//! The inner SELECT picks at most `$1` candidates; the outer DELETE re-checks
//! age, state and lease on the row it actually deletes, by the clock at that
//! moment. That re-check is what makes the race with live claims safe at READ
//! COMMITTED: if a renew, a reclaim (`recovered_ttl`, which gives the row a
//! fresh `expires_at`) or a steal (a fresh lease) updates a candidate first,
//! the DELETE waits for that commit and re-evaluates its WHERE on the new row
//! version (EvalPlanQual), which no longer matches, so the row is skipped and
//! never deleted while live (`docs/records.md#retention-and-cleanup`). If the DELETE wins
//! the row lock instead, the row it removes was past retention with an
//! expired lease at that instant: a late renew or finalize from its old owner
//! then matches no row and gets `lease_lost` (as it would had the lease been
//! stolen), and a concurrent claim's `INSERT … ON CONFLICT` waits for the
//! delete to commit and then inserts a fresh row.
//!
//! Portability (L9): a plain `DELETE … WHERE key IN (SELECT … LIMIT n)`, no
//! `SKIP LOCKED`; two replicas cleaning at once just delete disjoint or
//! overlapping batches, and an overlap deletes nothing twice. The predicate
//! is covered by migration V2's partial index.

use super::{Store, StoreError, duration_millis};

pub(super) use keyflight_store_core::routed::DELETE_EXPIRED;

impl Store {
    /// Deletes up to `limit` expired records (terminal, or `pending` whose
    /// lease ran out more than the settle horizon ago, past retention); returns
    /// how many.
    pub async fn delete_expired_batch(&self, limit: i64) -> Result<u64, StoreError> {
        if limit <= 0 {
            return Err(StoreError::Invalid(
                "cleanup batch size must be positive".into(),
            ));
        }
        let horizon_ms = duration_millis(self.settle_horizon);
        let pending_may_go = self.takeovers_held_until().is_none();
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&DELETE_EXPIRED)).await?;
            Ok(client
                .execute(&statement, &[&limit, &horizon_ms, &pending_may_go])
                .await?)
        })
        .await
    }
}
