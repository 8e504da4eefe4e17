//! L2: what the lease's owner does with it — renew, finalize, release.
//!
//! Every statement is fenced: it acts only `WHERE scope = $1 AND claim_id = $2
//! AND state = 'pending'`. A winner whose lease was stolen (or which already
//! settled the record) matches no row, and the call reports
//! [`StoreError::LeaseLost`] without touching the record — the new owner's
//! work is never overwritten.
//!
//! Settled rows keep their `claim_id` (the last claim that owned the record,
//! for operators); fencing still holds because every write here requires
//! `state = 'pending'`.
//!
//! Leaving `pending` fires the `keyflight_settled` NOTIFY (a trigger, see
//! migrations V1 and V3) when a follower watches the record, which wakes
//! long-poll waiters on every replica (L4); an unwatched record settles
//! without a NOTIFY, whose database-wide lock would serialize the commit.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    FinalizeRequest, ReleaseAs, ReleaseRequest, RenewRequest, RenewResponse,
};
use tokio_postgres::types::Json;

use super::{Store, StoreError, duration_millis, millis_param};

/// `$1` scope, `$2` claim id, `$3` lease ms.
const RENEW_SQL: &str = "
UPDATE keyflight_records
   SET lease_expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond',
       updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND state = 'pending'";

/// `$1` scope, `$2` claim id, `$3` status, `$4` headers, `$5` body, `$6` replayable.
pub const FINALIZE_SQL: &str = "
UPDATE keyflight_records
   SET state = 'completed', lease_expires_at = NULL,
       response_status = $3, response_headers = $4, response_body = $5,
       replayable = $6, updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND state = 'pending'";

/// `$1` scope, `$2` claim id, `$3` cooldown ms. The fingerprint stays, so only
/// the same request may retry after the cooldown (the claim's `steal` branch).
const RELEASE_COOLDOWN_SQL: &str = "
UPDATE keyflight_records
   SET state = 'failed',
       lease_expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond',
       updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND state = 'pending'";

/// `$1` scope, `$2` claim id.
const RELEASE_UNKNOWN_SQL: &str = "
UPDATE keyflight_records
   SET state = 'unknown', lease_expires_at = NULL, updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND state = 'pending'";

/// `$1` scope, `$2` claim id.
const RELEASE_FORGET_SQL: &str = "
DELETE FROM keyflight_records
 WHERE scope = $1 AND claim_id = $2 AND state = 'pending'";

impl Store {
    /// Extends the caller's lease to `lease_ms` from now (F4).
    pub async fn renew(
        &self,
        scope: &Digest,
        req: &RenewRequest,
    ) -> Result<RenewResponse, StoreError> {
        if req.lease_ms == 0 {
            return Err(StoreError::Invalid("lease_ms must be positive".into()));
        }
        let lease_ms = millis_param("lease_ms", req.lease_ms)?;
        self.run(async |client| {
            let statement = client.prepare_cached(RENEW_SQL).await?;
            let rows = client
                .execute(&statement, &[&scope.0.as_slice(), &req.claim_id, &lease_ms])
                .await?;
            owned(rows)
        })
        .await?;
        Ok(RenewResponse {
            lease_ms: req.lease_ms,
        })
    }

    /// Records the upstream's response: the record becomes `completed` (F6, F7).
    pub async fn finalize(&self, scope: &Digest, req: &FinalizeRequest) -> Result<(), StoreError> {
        let body = req
            .response
            .body()
            .ok_or_else(|| StoreError::Invalid("response.body_b64 is not valid base64".into()))?;
        let status = i32::from(req.response.status);
        let headers = Json(&req.response.headers);
        self.run(async |client| {
            let statement = client.prepare_cached(FINALIZE_SQL).await?;
            let rows = client
                .execute(
                    &statement,
                    &[
                        &scope.0.as_slice(),
                        &req.claim_id,
                        &status,
                        &headers,
                        &body,
                        &req.replayable,
                    ],
                )
                .await?;
            owned(rows)
        })
        .await
    }

    /// Gives the lease up without a recorded response (F6): `failed` with a
    /// cooldown, `unknown` for an operator, or the record forgotten.
    pub async fn release(&self, scope: &Digest, req: &ReleaseRequest) -> Result<(), StoreError> {
        let cooldown_ms = match req.cooldown_ms {
            Some(ms) => millis_param("cooldown_ms", ms)?,
            None => duration_millis(self.default_cooldown),
        };
        self.run(async |client| {
            let rows = match req.release_as {
                ReleaseAs::Cooldown => {
                    let statement = client.prepare_cached(RELEASE_COOLDOWN_SQL).await?;
                    client
                        .execute(
                            &statement,
                            &[&scope.0.as_slice(), &req.claim_id, &cooldown_ms],
                        )
                        .await?
                }
                ReleaseAs::Unknown => {
                    let statement = client.prepare_cached(RELEASE_UNKNOWN_SQL).await?;
                    client
                        .execute(&statement, &[&scope.0.as_slice(), &req.claim_id])
                        .await?
                }
                ReleaseAs::Forget => {
                    let statement = client.prepare_cached(RELEASE_FORGET_SQL).await?;
                    client
                        .execute(&statement, &[&scope.0.as_slice(), &req.claim_id])
                        .await?
                }
            };
            owned(rows)
        })
        .await
    }
}

/// One row changed: the claim still owned the record. None: the lease is lost.
fn owned(rows: u64) -> Result<(), StoreError> {
    if rows == 0 {
        Err(StoreError::LeaseLost)
    } else {
        Ok(())
    }
}
