//! L6: the operator's view of records — list, get, resolve, erase.
//!
//! These run rarely and by hand, so they favour clarity over speed; they still
//! use one statement each. Times are rendered by Postgres as RFC 3339 UTC
//! strings (millisecond precision), which is what the wire types carry.
//!
//! Resolve only moves an `unknown` record (an uncertain outcome needs a human
//! decision, `docs/records.md#operators`): to `completed` (with the response retries should
//! replay, or without one: completed, not replayable) or to `failed` with its
//! cooldown already over, so the next same-fingerprint claim runs again.
//! Erase deletes a record in any state; the API layer demands the replay-risk
//! acknowledgment and logs it. Erase and resolve each write their row of the
//! operator audit (migration V5: actor, reason, scope, action, and the digest of
//! a response the operator authored) in the same statement, so neither commits
//! without it, through the owner's function (V9), as the runtime role may not insert.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    RecordDetail, RecordList, RecordState, RecordSummary, ResolveAs, ResolveRequest, StoredResponse,
};
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::claim::stored_response;
use super::partitions::Routed;
use super::{Store, StoreError};

/// The summary columns, shared by list and get.
macro_rules! summary_columns {
    () => {
        "scope, state, fingerprint, fence, replayable, response_status,
         to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS created_at,
         to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
             AS lease_expires_at,
         to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS expires_at"
    };
}

/// `$1` state or NULL for all, `$2` limit. Newest first.
///
/// Each state's newest are read from the `(state, created_at DESC)` index and only
/// those are merged, so a list reads at most `$2` rows per state however large the
/// table (`docs/records.md#the-indexes`). The states are the table's `CHECK`
/// (migration V1); `every_state_is_listed` in the store tests holds the two together.
const LIST_SQL: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM unnest(CASE WHEN $1::text IS NULL
                       THEN ARRAY['pending', 'completed', 'failed', 'unknown']
                       ELSE ARRAY[$1::text] END) AS wanted(listed_state)
     CROSS JOIN LATERAL (
           SELECT * FROM keyflight_records r
            WHERE r.state = wanted.listed_state
            ORDER BY r.created_at DESC
            LIMIT $2) AS r
     ORDER BY r.created_at DESC
     LIMIT $2"
);

/// `$1` scope.
const GET_SQL: &str = concat!(
    "SELECT ",
    summary_columns!(),
    ", response_headers, response_body FROM keyflight_records WHERE scope = $1"
);

/// `$1` scope, `$2` status, `$3` headers, `$4` body (NULLs: not replayable),
/// `$5` actor, `$6` reason, `$7` the response's digest.
/// `state_before` reads the statement's snapshot, i.e. the state before the
/// update, so one statement tells "resolved", "not unknown" and "not found" apart.
/// The audit row is appended by the owner's function (migration V9), which the runtime role
/// may call but not bypass; a `SELECT` in `WITH` runs only when read, so `resolved` is
/// counted through `audited`, one row per resolved record.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
const RESOLVE_COMPLETED_SQL: &str = "
WITH resolved AS (
    UPDATE keyflight_records
       SET state = 'completed', lease_expires_at = NULL,
           response_status = $2::integer, response_headers = $3::jsonb, response_body = $4::bytea,
           replayable = $4::bytea IS NOT NULL, updated_at = clock_timestamp()
     WHERE scope = $1 AND (state || '') = 'unknown'
    RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($5::text, 'resolve_completed', scope, $6::text, $7::bytea)
      FROM resolved
)
SELECT (SELECT count(*) FROM audited) AS resolved,
       (SELECT state FROM keyflight_records WHERE scope = $1) AS state_before";

/// `$1` scope, `$2` actor, `$3` reason. The cooldown ends now, so the next
/// same-fingerprint claim steals. Audited as [`RESOLVE_COMPLETED_SQL`] is.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
const RESOLVE_FAILED_SQL: &str = "
WITH resolved AS (
    UPDATE keyflight_records
       SET state = 'failed', lease_expires_at = clock_timestamp(),
           response_status = NULL, response_headers = NULL, response_body = NULL,
           updated_at = clock_timestamp()
     WHERE scope = $1 AND (state || '') = 'unknown'
    RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($2::text, 'resolve_failed', scope, $3::text, NULL)
      FROM resolved
)
SELECT (SELECT count(*) FROM audited) AS resolved,
       (SELECT state FROM keyflight_records WHERE scope = $1) AS state_before";

/// `$1` scope, `$2` actor, `$3` reason. Audited as [`RESOLVE_COMPLETED_SQL`] is.
const ERASE_SQL: &str = "
WITH erased AS (
    DELETE FROM keyflight_records WHERE scope = $1 RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($2::text, 'erase', scope, $3::text, NULL)
      FROM erased
)
SELECT count(*) AS erased FROM audited";

/// The operator's statements on a partitioned database (`partitions.rs`): a list merges
/// every partition's newest, ordered and cut as one database's list.
pub(super) static LIST: Routed = Routed::on_all(
    "list",
    LIST_SQL,
    Some("SELECT * FROM keyflight_list($1, $2) ORDER BY created_at DESC LIMIT $2"),
);
pub(super) static GET: Routed = Routed::by_scope("get", GET_SQL);
pub(super) static RESOLVE_COMPLETED: Routed =
    Routed::by_scope("resolve_completed", RESOLVE_COMPLETED_SQL);
pub(super) static RESOLVE_FAILED: Routed = Routed::by_scope("resolve_failed", RESOLVE_FAILED_SQL);
pub(super) static ERASE: Routed = Routed::by_scope("erase", ERASE_SQL);

impl Store {
    /// Up to `limit` records, newest first, optionally only those in `state`.
    pub async fn list(
        &self,
        state: Option<RecordState>,
        limit: u32,
    ) -> Result<RecordList, StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&LIST)).await?;
            let rows = client
                .query(
                    &statement,
                    &[&state.map(RecordState::as_str), &i64::from(limit)],
                )
                .await?;
            let records = rows.iter().map(summary).collect::<Result<_, _>>()?;
            Ok(RecordList { records })
        })
        .await
    }

    /// One record with its response.
    pub async fn get(&self, scope: &Digest) -> Result<RecordDetail, StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&GET)).await?;
            let row = client
                .query_opt(&statement, &[&scope.0.as_slice()])
                .await?
                .ok_or(StoreError::NotFound)?;
            Ok(RecordDetail {
                summary: summary(&row)?,
                response: stored_response(&row)?,
            })
        })
        .await
    }

    /// Settles an `unknown` record as the operator `actor` decided, with its audit row.
    pub async fn resolve(
        &self,
        scope: &Digest,
        req: &ResolveRequest,
        actor: &str,
    ) -> Result<(), StoreError> {
        self.run(async |client| {
            let row = match req.resolve_as {
                ResolveAs::Completed => {
                    let (status, headers, body) = match &req.response {
                        Some(response) => (
                            Some(i32::from(response.status)),
                            Some(Json(response.headers.clone())),
                            Some(response.body.as_slice()),
                        ),
                        None => (None, None, None),
                    };
                    let authored = req.response.as_ref().map(response_digest);
                    let statement = client.prepare_cached(self.sql(&RESOLVE_COMPLETED)).await?;
                    client
                        .query_one(
                            &statement,
                            &[
                                &scope.0.as_slice(),
                                &status,
                                &headers,
                                &body,
                                &actor,
                                &req.reason,
                                &authored.as_ref().map(|d| d.0.as_slice()),
                            ],
                        )
                        .await?
                }
                ResolveAs::Failed => {
                    let statement = client.prepare_cached(self.sql(&RESOLVE_FAILED)).await?;
                    client
                        .query_one(&statement, &[&scope.0.as_slice(), &actor, &req.reason])
                        .await?
                }
            };
            let resolved: i64 = row.try_get("resolved")?;
            let state_before: Option<&str> = row.try_get("state_before")?;
            match (resolved, state_before) {
                (0, None) => Err(StoreError::NotFound),
                (0, Some(_)) => Err(StoreError::NotUnknown),
                _ => Ok(()),
            }
        })
        .await
    }

    /// Deletes a record in any state, with the audit row of `actor` and `reason`. The
    /// next claim on the scope runs the request again: the caller must have
    /// acknowledged that risk.
    pub async fn erase(&self, scope: &Digest, actor: &str, reason: &str) -> Result<(), StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&ERASE)).await?;
            let row = client
                .query_one(&statement, &[&scope.0.as_slice(), &actor, &reason])
                .await?;
            match row.try_get::<_, i64>("erased")? {
                0 => Err(StoreError::NotFound),
                _ => Ok(()),
            }
        })
        .await
    }
}

/// The digest the audit keeps of a response an operator authored: SHA-256 of the
/// response as the API's JSON (`status`, `headers`, `body_b64`), so an operator can
/// check it against the request they sent.
pub fn response_digest(response: &StoredResponse) -> Digest {
    Digest::of(&serde_json::to_vec(response).unwrap_or_default())
}

/// A row's summary columns.
fn summary(row: &Row) -> Result<RecordSummary, StoreError> {
    let state: &str = row.try_get("state")?;
    let status: Option<i32> = row.try_get("response_status")?;
    Ok(RecordSummary {
        scope: digest(row.try_get("scope")?)?,
        state: RecordState::parse(state)
            .ok_or_else(|| StoreError::Unavailable(format!("unexpected record state {state}")))?,
        fingerprint: digest(row.try_get("fingerprint")?)?,
        fence: row.try_get("fence")?,
        created_at: row.try_get("created_at")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        expires_at: row.try_get("expires_at")?,
        replayable: row.try_get("replayable")?,
        status: status.and_then(|s| u16::try_from(s).ok()),
    })
}

/// A 32-byte column as a digest (the table's CHECKs guarantee the length).
fn digest(bytes: &[u8]) -> Result<Digest, StoreError> {
    <[u8; 32]>::try_from(bytes)
        .map(Digest)
        .map_err(|_| StoreError::Unavailable("a stored digest is not 32 bytes".into()))
}
