//! Lease-store HTTP API v1 wire types (SPEC §6).
//!
//! The filter, the lease-store and its CLI all speak through these types, so
//! a field renamed here is renamed everywhere at once. Field names and outcome
//! spellings are the contract: change them only with a new API version.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Digest;

/// `POST /v1/claims/{scope}`: claim the lease on a scope, or learn its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The request fingerprint (K4) the caller wants to run.
    pub fingerprint: Digest,
    /// Lease length granted to a winner, in milliseconds.
    pub lease_ms: u64,
    /// Long-poll budget for a same-fingerprint pending record (F5, L4). `0` or absent: answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Record retention for this scope, in seconds (L5). Absent: the store's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_s: Option<u64>,
}

/// How a winner got its lease (an event counter in F13 and L8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WonHow {
    /// No record existed.
    Claimed,
    /// A record past its retention was reused.
    RecoveredTtl,
    /// An expired pending lease (crashed winner) or an elapsed failure cooldown, same fingerprint.
    RecoveredAbandoned,
}

impl WonHow {
    /// The snake_case spelling used on the wire and in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            WonHow::Claimed => "claimed",
            WonHow::RecoveredTtl => "recovered_ttl",
            WonHow::RecoveredAbandoned => "recovered_abandoned",
        }
    }
}

/// The answer to a claim: exactly one outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ClaimResponse {
    /// The caller owns the lease and may forward the request upstream.
    Won {
        /// Fences renew/finalize/release to this claim (L2).
        claim_id: Uuid,
        /// Strictly increasing token forwarded upstream as `Idempotency-Fence`.
        fence: i64,
        /// How the lease was obtained.
        how: WonHow,
        /// The lease granted, in milliseconds.
        lease_ms: u64,
    },
    /// Completed with the same fingerprint: replay this response.
    Completed {
        /// The recorded response.
        response: StoredResponse,
    },
    /// The scope holds a different fingerprint.
    Conflict,
    /// Same fingerprint, still running (after the long-poll budget, if any).
    InProgress {
        /// Suggested `Retry-After`, in whole seconds.
        retry_after_s: u64,
    },
    /// Same fingerprint, the last attempt failed and its cooldown has not elapsed.
    Cooldown {
        /// Suggested `Retry-After`, in whole seconds.
        retry_after_s: u64,
    },
    /// Completed, but the response was not kept (too large).
    NotReplayable,
    /// The outcome is uncertain and needs an operator (`unknown` state).
    Unknown,
}

/// A recorded upstream response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Allowlisted headers, lowercase names, in order.
    pub headers: Vec<(String, String)>,
    /// The body, standard base64 with padding.
    pub body_b64: String,
}

impl StoredResponse {
    /// Builds a stored response from raw body bytes.
    pub fn new(status: u16, headers: Vec<(String, String)>, body: &[u8]) -> Self {
        StoredResponse {
            status,
            headers,
            body_b64: base64::engine::general_purpose::STANDARD.encode(body),
        }
    }

    /// Decodes the body; `None` if `body_b64` is not valid base64.
    pub fn body(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.body_b64)
            .ok()
    }
}

/// `POST /v1/claims/{scope}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The caller's claim.
    pub claim_id: Uuid,
    /// New lease length from now, in milliseconds.
    pub lease_ms: u64,
}

/// Answer to a successful renew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenewResponse {
    /// The lease now granted, in milliseconds.
    pub lease_ms: u64,
}

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

/// `POST /v1/claims/{scope}/finalize`: record the upstream's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FinalizeRequest {
    /// The caller's claim.
    pub claim_id: Uuid,
    /// The response to record (empty body when not replayable).
    pub response: StoredResponse,
    /// `false` for a success too large to keep (F6): completed, not replayable.
    pub replayable: bool,
}

/// What a release turns the record into (F6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReleaseAs {
    /// `failed` with a cooldown: retryable 5xx/408/429 or `uncertain: retry`.
    Cooldown,
    /// `unknown`: the outcome is uncertain and needs an operator (`uncertain: hold`).
    Unknown,
    /// Delete the record: nothing was recorded (401/403/3xx).
    Forget,
}

/// `POST /v1/claims/{scope}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The caller's claim.
    pub claim_id: Uuid,
    /// What the record becomes.
    #[serde(rename = "as")]
    pub release_as: ReleaseAs,
    /// Cooldown for `as: cooldown`, in milliseconds. Absent: the store's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_ms: Option<u64>,
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
}

/// Header the admin erase call must carry (L6).
pub const ACK_REPLAY_RISK_HEADER: &str = "keyflight-ack-replay-risk";
