//! L5: deleting records past their retention, one bounded batch at a time.
//!
//! The inner SELECT picks at most `$1` candidates; the outer DELETE re-checks
//! age and state on the row it actually deletes. Between the two, a claim may
//! have reclaimed a candidate (`recovered_ttl` makes it `pending` with a fresh
//! `expires_at`); the re-check then skips it, so cleanup never deletes a live
//! record (seed 000's cleanup race fix).
//!
//! Only `completed` and `failed` rows expire. `pending` rows are live or
//! reclaimable by the claim's `ttl` branch; `unknown` rows wait for an operator
//! (seed 004: an uncertain outcome must not silently become "never ran"), so
//! they are kept until resolved or erased.
//!
//! Portability (L9): a plain `DELETE … WHERE key IN (SELECT … LIMIT n)`, no
//! `SKIP LOCKED`; two replicas cleaning at once just delete disjoint or
//! overlapping batches, and an overlap deletes nothing twice.

use super::{Store, StoreError};

/// `$1` batch size.
const DELETE_EXPIRED_SQL: &str = "
DELETE FROM keyflight_records
 WHERE scope IN (SELECT scope FROM keyflight_records
                  WHERE expires_at < clock_timestamp()
                    AND state IN ('completed', 'failed')
                  LIMIT $1)
   AND expires_at < clock_timestamp()
   AND state IN ('completed', 'failed')";

impl Store {
    /// Deletes up to `limit` terminal records past retention; returns how many.
    pub async fn delete_expired_batch(&self, limit: i64) -> Result<u64, StoreError> {
        if limit <= 0 {
            return Err(StoreError::Invalid(
                "cleanup batch size must be positive".into(),
            ));
        }
        let client = self.client().await?;
        let statement = client.prepare_cached(DELETE_EXPIRED_SQL).await?;
        Ok(client.execute(&statement, &[&limit]).await?)
    }
}
