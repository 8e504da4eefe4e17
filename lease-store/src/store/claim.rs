//! L1: claiming a scope in one committed statement, and explaining a lost claim.
//!
//! [`CLAIM_SQL`] is seed 000's three-CTE shape, raced on this machine (see
//! FIELD-NOTES "The claim statement"): of N concurrent claims exactly one wins.
//!
//! * `ins` inserts a fresh `pending` row; `ON CONFLICT DO NOTHING` makes every
//!   concurrent inserter but one wait for the winner's commit and then skip.
//! * `ttl` reuses a record past its retention, whatever its fingerprint — but
//!   never a `pending` row whose lease is still live, and never an `unknown`
//!   row (an uncertain outcome waits for an operator, seed 004).
//! * `steal` takes over, **with the same fingerprint only**, a `pending` row
//!   whose lease ran out (crashed winner) or a `failed` row whose cooldown
//!   elapsed. Concurrent stealers serialize on the row lock and Postgres
//!   re-checks the predicate on the new row version, so one wins.
//!
//! All lease math uses `clock_timestamp()` (which advances during the
//! statement), not `now()`, so waiting on a row lock cannot mint an
//! already-expired lease. Every branch draws a fresh `fence` from the
//! sequence (L2). A claim that returns no row lost; a second statement
//! ([`READ_SQL`]) reads the record to say why. The two statements are not one
//! transaction: if the row changed in between (settled, expired, cleaned up),
//! the claim simply runs again, a bounded number of times.
//!
//! Portability (L9): plain `INSERT … ON CONFLICT` and data-modifying CTEs, no
//! advisory locks or `SKIP LOCKED`.

use std::time::{Duration, Instant};

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, StoredResponse, WonHow};
use tokio_postgres::Row;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::{ClaimAttempt, Store, StoreError, duration_millis, millis_param, retry_after_s};

/// `$1` scope, `$2` fingerprint, `$3` claim id, `$4` lease ms, `$5` retention ms.
pub const CLAIM_SQL: &str = "
WITH ins AS (
    INSERT INTO keyflight_records
        (scope, state, fingerprint, claim_id, fence, lease_expires_at,
         created_at, retention, expires_at, updated_at)
    VALUES ($1, 'pending', $2, $3, nextval('keyflight_fence_seq'),
            clock_timestamp() + $4::bigint * interval '1 millisecond',
            clock_timestamp(), $5::bigint * interval '1 millisecond',
            clock_timestamp() + $5::bigint * interval '1 millisecond',
            clock_timestamp())
    ON CONFLICT (scope) DO NOTHING
    RETURNING 'claimed'::text AS how, fence
),
ttl AS (
    UPDATE keyflight_records r
       SET state = 'pending', fingerprint = $2, claim_id = $3,
           fence = nextval('keyflight_fence_seq'),
           lease_expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
           created_at = clock_timestamp(),
           retention = $5::bigint * interval '1 millisecond',
           expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
           response_status = NULL, response_headers = NULL, response_body = NULL,
           replayable = true, updated_at = clock_timestamp()
     WHERE r.scope = $1
       AND NOT EXISTS (SELECT 1 FROM ins)
       AND r.expires_at < clock_timestamp()
       AND (r.state IN ('completed', 'failed')
            OR (r.state = 'pending' AND r.lease_expires_at < clock_timestamp()))
    RETURNING 'recovered_ttl'::text AS how, r.fence
),
steal AS (
    UPDATE keyflight_records r
       SET state = 'pending', claim_id = $3,
           fence = nextval('keyflight_fence_seq'),
           lease_expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
           created_at = clock_timestamp(),
           retention = $5::bigint * interval '1 millisecond',
           expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
           response_status = NULL, response_headers = NULL, response_body = NULL,
           replayable = true, updated_at = clock_timestamp()
     WHERE r.scope = $1
       AND NOT EXISTS (SELECT 1 FROM ins)
       AND NOT EXISTS (SELECT 1 FROM ttl)
       AND r.expires_at >= clock_timestamp()
       AND r.state IN ('pending', 'failed')
       AND r.lease_expires_at < clock_timestamp()
       AND r.fingerprint = $2
    RETURNING 'recovered_abandoned'::text AS how, r.fence
)
SELECT how, fence FROM ins
UNION ALL SELECT how, fence FROM ttl
UNION ALL SELECT how, fence FROM steal";

/// Reads what a lost claim lost to. `remaining_ms` is the time left on the
/// lease (pending) or cooldown (failed), by the database's clock.
const READ_SQL: &str = "
SELECT state, fingerprint, replayable, response_status, response_headers, response_body,
       GREATEST(0, ceil(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000))::bigint
           AS remaining_ms
  FROM keyflight_records
 WHERE scope = $1";

/// How many times a claim re-runs when the record changes between the claim
/// and the read. Each re-run needs a concurrent transition, so a handful is
/// plenty; past it the caller is told to come back shortly.
const MAX_ATTEMPTS: usize = 4;

/// What the read after a lost claim concluded.
enum Lost {
    /// Tell the caller this.
    Answer(ClaimAttempt),
    /// The record changed under us (gone, lease or cooldown just ran out): claim again.
    Retry,
}

impl Store {
    /// Makes ONE claim attempt on `scope` (no waiting): wins the lease, or
    /// reports the state that won instead.
    pub async fn claim(
        &self,
        scope: &Digest,
        req: &ClaimRequest,
    ) -> Result<ClaimAttempt, StoreError> {
        if req.lease_ms == 0 {
            return Err(StoreError::Invalid("lease_ms must be positive".into()));
        }
        let lease_ms = millis_param("lease_ms", req.lease_ms)?;
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
        self.run(async |client| {
            let claim = client.prepare_cached(CLAIM_SQL).await?;
            let read = client.prepare_cached(READ_SQL).await?;
            for _ in 0..MAX_ATTEMPTS {
                let claim_id = Uuid::now_v7();
                let won = client
                    .query_opt(
                        &claim,
                        &[
                            &scope.0.as_slice(),
                            &req.fingerprint.0.as_slice(),
                            &claim_id,
                            &lease_ms,
                            &retention_ms,
                        ],
                    )
                    .await?;
                if let Some(row) = won {
                    return won_attempt(&row, claim_id, req.lease_ms);
                }
                let existing = client.query_opt(&read, &[&scope.0.as_slice()]).await?;
                match existing.map(|row| explain_lost(&row, &req.fingerprint)) {
                    Some(Ok(Lost::Answer(attempt))) => return Ok(attempt),
                    Some(Err(e)) => return Err(e),
                    Some(Ok(Lost::Retry)) | None => continue,
                }
            }
            Ok(ClaimAttempt {
                response: ClaimResponse::InProgress { retry_after_s: 1 },
                pending_until: None,
            })
        })
        .await
    }
}

fn won_attempt(row: &Row, claim_id: Uuid, lease_ms: u64) -> Result<ClaimAttempt, StoreError> {
    let how: &str = row.try_get("how")?;
    let how = match how {
        "claimed" => WonHow::Claimed,
        "recovered_ttl" => WonHow::RecoveredTtl,
        _ => WonHow::RecoveredAbandoned,
    };
    Ok(ClaimAttempt {
        response: ClaimResponse::Won {
            claim_id,
            fence: row.try_get("fence")?,
            how,
            lease_ms,
        },
        pending_until: None,
    })
}

/// Maps the record a claim lost to onto the answer (F3).
///
/// A different fingerprint is a conflict in every state, `unknown` included:
/// the caller's request is not the one whose outcome is uncertain.
fn explain_lost(row: &Row, fingerprint: &Digest) -> Result<Lost, StoreError> {
    let stored_fingerprint: &[u8] = row.try_get("fingerprint")?;
    if stored_fingerprint != fingerprint.0.as_slice() {
        return Ok(Lost::Answer(answer(ClaimResponse::Conflict)));
    }
    let state: &str = row.try_get("state")?;
    let remaining_ms: Option<i64> = row.try_get("remaining_ms")?;
    let remaining_ms = remaining_ms.unwrap_or(0);
    Ok(match state {
        "completed" => Lost::Answer(answer(completed_response(row)?)),
        "pending" if remaining_ms > 0 => Lost::Answer(ClaimAttempt {
            response: ClaimResponse::InProgress {
                retry_after_s: retry_after_s(remaining_ms),
            },
            pending_until: Some(
                Instant::now() + Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0)),
            ),
        }),
        "failed" if remaining_ms > 0 => Lost::Answer(answer(ClaimResponse::Cooldown {
            retry_after_s: retry_after_s(remaining_ms),
        })),
        "unknown" => Lost::Answer(answer(ClaimResponse::Unknown)),
        _ => Lost::Retry,
    })
}

/// A completed record: its response, or `not_replayable`.
fn completed_response(row: &Row) -> Result<ClaimResponse, StoreError> {
    let replayable: bool = row.try_get("replayable")?;
    if !replayable {
        return Ok(ClaimResponse::NotReplayable);
    }
    Ok(ClaimResponse::Completed {
        response: stored_response(row)?
            .ok_or_else(|| StoreError::Unavailable("a replayable record has no response".into()))?,
    })
}

/// The recorded response in a row (`response_status`, `response_headers`,
/// `response_body`), or `None` when there is none.
pub(super) fn stored_response(row: &Row) -> Result<Option<StoredResponse>, StoreError> {
    let status: Option<i32> = row.try_get("response_status")?;
    let body: Option<&[u8]> = row.try_get("response_body")?;
    let (Some(status), Some(body)) = (status, body) else {
        return Ok(None);
    };
    let headers: Option<Json<Vec<(String, String)>>> = row.try_get("response_headers")?;
    let status = u16::try_from(status)
        .map_err(|_| StoreError::Unavailable(format!("stored status {status} out of range")))?;
    Ok(Some(StoredResponse::new(
        status,
        headers.map(|Json(h)| h).unwrap_or_default(),
        body,
    )))
}

fn answer(response: ClaimResponse) -> ClaimAttempt {
    ClaimAttempt {
        response,
        pending_until: None,
    }
}
