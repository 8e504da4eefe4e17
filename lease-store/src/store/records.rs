//! L6: the operator's view of records — list, get, resolve, erase, and a record's audit rows.
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

use super::snapshot::stored_response;
use super::{Store, StoreError};

pub(super) use keyflight_store_core::routed::AUDIT;
pub(super) use keyflight_store_core::routed::ERASE;
pub(super) use keyflight_store_core::routed::GET;
pub(super) use keyflight_store_core::routed::LIST;
pub(super) use keyflight_store_core::routed::RESOLVE_COMPLETED;
pub(super) use keyflight_store_core::routed::RESOLVE_FAILED;

/// One row of the operator audit about a record: a decision and who took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// When, RFC 3339 UTC.
    pub at: String,
    /// The operator's token name, or `reconciler:<workload>` for a service's answer.
    pub actor: String,
    /// What was done (`erase`, `resolve_completed`, `resolve_failed`, …).
    pub action: String,
    /// Why, as the decision gave it.
    pub reason: String,
    /// The digest of a response the decision recorded ([`response_digest`]).
    pub response_sha256: Option<Digest>,
}

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

    /// The newest audit rows about `scope`, newest first (the console's record page).
    pub async fn audit(&self, scope: &Digest) -> Result<Vec<AuditRow>, StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&AUDIT)).await?;
            let rows = client.query(&statement, &[&scope.0.as_slice()]).await?;
            rows.iter()
                .map(|row| {
                    let response: Option<&[u8]> = row.try_get("response_sha256")?;
                    Ok(AuditRow {
                        at: row.try_get("at")?,
                        actor: row.try_get("actor")?,
                        action: row.try_get("action")?,
                        reason: row.try_get("reason")?,
                        response_sha256: response.map(digest).transpose()?,
                    })
                })
                .collect()
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
        workload: match row
            .columns()
            .iter()
            .any(|column| column.name() == "workload")
        {
            true => row.try_get("workload")?,
            // A partitioned router installed by an earlier binary of the same schema
            // version: its functions return no workload until `migrate` runs again.
            false => None,
        },
    })
}

/// A 32-byte column as a digest (the table's CHECKs guarantee the length).
fn digest(bytes: &[u8]) -> Result<Digest, StoreError> {
    <[u8; 32]>::try_from(bytes)
        .map(Digest)
        .map_err(|_| StoreError::Unavailable("a stored digest is not 32 bytes".into()))
}
