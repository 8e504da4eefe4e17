//! Holding the lapsed at-most-once leases that no claim came back for.
//!
//! A claim that meets an at-most-once record whose lease ran out makes it `unknown`
//! (`claim.rs`, `docs/records.md#a-lapsed-at-most-once-lease`). A key whose dead winner
//! is never retried meets no claim, yet it is the same uncertain outcome, so the cleanup
//! pass (`crate::cleanup`) makes it `unknown` too, counted and listed for an operator like
//! the others. It waits for the *settle horizon* past the lease, as cleanup does before it
//! deletes an abandoned `pending` row (`docs/records.md#retention-and-cleanup`): a
//! winner cut off by an outage may still land its record until then; a replica in its
//! takeover grace holds nothing. Within the record's retention only: past it, the row is
//! cleanup's to delete, as the `ttl` branch may reuse it.
//!
//! The race argument is cleanup's: the inner SELECT picks at most `$1` candidates by the
//! statement's start, the outer UPDATE re-checks state, flag, lease and retention on the
//! row it updates by the clock at that moment, so a row a renew, settle or claim changed
//! first is re-evaluated on its new version (EvalPlanQual) and skipped.

use keyflight_protocol::Digest;

use super::{Store, StoreError, duration_millis};

pub(super) use keyflight_store_core::routed::HOLD_ABANDONED;

impl Store {
    /// Makes up to `limit` at-most-once records whose lease ran out more than the settle
    /// horizon ago `unknown`; returns how many (each counted as a held lapse).
    pub async fn hold_abandoned_batch(&self, limit: i64) -> Result<u64, StoreError> {
        if limit <= 0 {
            return Err(StoreError::Invalid(
                "cleanup batch size must be positive".into(),
            ));
        }
        let horizon_ms = duration_millis(self.settle_horizon);
        let may_hold = self.takeovers_held_until().is_none();
        let rows = self
            .run(async |client| {
                let statement = client.prepare_cached(self.sql(&HOLD_ABANDONED)).await?;
                Ok(client
                    .query(&statement, &[&limit, &horizon_ms, &may_hold])
                    .await?)
            })
            .await?;
        for row in &rows {
            let scope: &[u8] = row.try_get("scope")?;
            if let Ok(scope) = <[u8; 32]>::try_from(scope) {
                crate::evidence::lapse_held(&Digest(scope), row.try_get("fence")?);
            }
        }
        let held = u64::try_from(rows.len()).unwrap_or(u64::MAX);
        self.lapses_held.inc_by(held);
        Ok(held)
    }
}
