//! What operators and edge caches read and change: the operator epoch, a record's state,
//! its summary and detail as listed, and an operator's resolve (`docs/operations.md`).

use serde::{Deserialize, Serialize};

use super::StoredResponse;
// Named by the field docs' links (kept as they were: utoipa turns them into the
// OpenAPI document's descriptions).
#[cfg(doc)]
use super::MAX_REASON_CHARS;
use crate::Digest;

/// `GET /v1/epoch`: the store's operator epoch (F9).
///
/// It grows by one with every operator erase or resolve, in the same
/// transaction. An edge serves a cached record only while the epoch it read
/// the cache under is still the one the store reports, so an erased or
/// re-resolved record stops being served once the edge hears of the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EpochResponse {
    /// The number of operator changes so far.
    pub epoch: u64,
}

/// The state of a record (L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// A winner holds the lease.
    Pending,
    /// The response is recorded.
    Completed,
    /// The last attempt failed; retryable after the cooldown.
    Failed,
    /// The outcome is uncertain; needs an operator.
    Unknown,
}

impl RecordState {
    /// The spelling stored in the database and used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::Pending => "pending",
            RecordState::Completed => "completed",
            RecordState::Failed => "failed",
            RecordState::Unknown => "unknown",
        }
    }

    /// Parses the database / wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => RecordState::Pending,
            "completed" => RecordState::Completed,
            "failed" => RecordState::Failed,
            "unknown" => RecordState::Unknown,
            _ => return None,
        })
    }
}

/// A record as the operator API shows it (L6). Times are RFC 3339 strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordSummary {
    /// The scope digest (the record's key).
    pub scope: Digest,
    /// Current state.
    pub state: RecordState,
    /// Fingerprint of the request that owns the record.
    pub fingerprint: Digest,
    /// Fence of the latest claim.
    pub fence: i64,
    /// When the current claim was created.
    pub created_at: String,
    /// Lease or cooldown expiry (pending, failed).
    pub lease_expires_at: Option<String>,
    /// When the record becomes eligible for cleanup.
    pub expires_at: String,
    /// Whether a completed record can be replayed.
    pub replayable: bool,
    /// Recorded status code (completed, resolved).
    pub status: Option<u16>,
    /// The workload whose claim made the record (its SPIFFE id), when the store knew the
    /// caller's mesh identity; absent for a bearer-token caller, and from a store that
    /// predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
}

/// `GET /v1/records?state=…&limit=…`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordList {
    /// Matching records, newest first, without bodies.
    pub records: Vec<RecordSummary>,
}

/// `GET /v1/records/{scope}`: one record with its response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecordDetail {
    /// The record's metadata.
    #[serde(flatten)]
    pub summary: RecordSummary,
    /// The recorded response, if any.
    pub response: Option<StoredResponse>,
}

/// What an operator resolves an `unknown` record to (L6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ResolveAs {
    /// The operation happened: record `response` (or none: completed, not replayable).
    Completed,
    /// The operation did not happen: a same-body retry may run again.
    Failed,
}

/// `POST /v1/records/{scope}/resolve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// The resolution.
    #[serde(rename = "as")]
    pub resolve_as: ResolveAs,
    /// For `as: completed`: the response retries should get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<StoredResponse>,
    /// Why the operator resolves it (1 to [`MAX_REASON_CHARS`] characters, no control
    /// characters); kept in the store's audit.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 1000,
            pattern = r"^[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
        )
    )]
    pub reason: String,
}
