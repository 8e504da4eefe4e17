//! The stable error codes of RFC 9457 problem details (F10,
//! `docs/stream-machine.md#local-replies`, `docs/records.md#the-api`).
//!
//! Both the filter's local replies and the lease-store's errors use these
//! codes, so one enum keeps their spelling identical everywhere, and one
//! table ([`ProblemCode::status`]) gives each its HTTP status. The IETF
//! draft's status profile differs from keyflight's in two codes only; it is
//! an override of that table ([`ProblemCode::status_under`]), not a second one.

use serde::{Deserialize, Serialize};

/// A stable, machine-readable problem code (`code` member of problem+json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProblemCode {
    /// K1: the policy requires a key and none was sent.
    IdempotencyKeyRequired,
    /// K1: the key is empty, too long, not visible ASCII or repeated.
    IdempotencyKeyInvalid,
    /// K2: no principal could be determined.
    PrincipalRequired,
    /// K2: a principal source is present but does not name exactly one
    /// principal (a repeated header, a claim that is not a string).
    PrincipalAmbiguous,
    /// F1: the request body exceeds the policy's cap.
    PayloadTooLarge,
    /// F2: the lease-store (or its database) cannot be reached.
    JournalUnavailable,
    /// F3: same key, different request.
    IdempotencyConflict,
    /// F5: the winner is still running after the follower's wait budget.
    RequestInProgress,
    /// F3/F6: the last attempt failed; retry after the cooldown.
    RetryableCooldown,
    /// F3/F6: the operation completed but its response was too large to keep.
    ResponseNotReplayable,
    /// F3/F6: the outcome is uncertain and needs an operator.
    OperationUnknown,
    /// L2: the caller's claim is no longer the current owner of the lease.
    LeaseLost,
    /// L7: missing or wrong bearer token.
    Unauthorized,
    /// L7: the token is valid but not allowed to call this endpoint.
    Forbidden,
    /// L7: malformed request (bad JSON, bad digest, out-of-range field).
    BadRequest,
    /// L6: the record does not exist.
    NotFound,
    /// L6: erasure without the replay-risk acknowledgment header.
    ReplayRiskNotAcknowledged,
    /// L6: resolving a record that is not `unknown`.
    NotUnknown,
    /// L7: the path exists, but not with this HTTP method (see `Allow`).
    MethodNotAllowed,
    /// L7: the caller's workload keeps as many records or bytes as its storage quota
    /// allows; a claim that would add a record is refused (`docs/records.md#storage-quota`).
    StorageQuota,
}

impl ProblemCode {
    /// The snake_case spelling used in `code` and in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyKeyRequired => "idempotency_key_required",
            Self::IdempotencyKeyInvalid => "idempotency_key_invalid",
            Self::PrincipalRequired => "principal_required",
            Self::PrincipalAmbiguous => "principal_ambiguous",
            Self::PayloadTooLarge => "payload_too_large",
            Self::JournalUnavailable => "journal_unavailable",
            Self::IdempotencyConflict => "idempotency_conflict",
            Self::RequestInProgress => "request_in_progress",
            Self::RetryableCooldown => "retryable_cooldown",
            Self::ResponseNotReplayable => "response_not_replayable",
            Self::OperationUnknown => "operation_unknown",
            Self::LeaseLost => "lease_lost",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::BadRequest => "bad_request",
            Self::NotFound => "not_found",
            Self::ReplayRiskNotAcknowledged => "replay_risk_not_acknowledged",
            Self::NotUnknown => "not_unknown",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::StorageQuota => "storage_quota",
        }
    }

    /// A short, human title for the `title` member.
    pub fn title(self) -> &'static str {
        match self {
            Self::IdempotencyKeyRequired => "Idempotency-Key required",
            Self::IdempotencyKeyInvalid => "Idempotency-Key invalid",
            Self::PrincipalRequired => "Principal required",
            Self::PrincipalAmbiguous => "Principal ambiguous",
            Self::PayloadTooLarge => "Payload too large",
            Self::JournalUnavailable => "Idempotency journal unavailable",
            Self::IdempotencyConflict => "Idempotency key reused with a different request",
            Self::RequestInProgress => "Request with this key is still in progress",
            Self::RetryableCooldown => "Previous attempt failed; retry later",
            Self::ResponseNotReplayable => "Completed, but the response cannot be replayed",
            Self::OperationUnknown => "Outcome of the earlier attempt is unknown",
            Self::LeaseLost => "Lease lost",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden => "Forbidden",
            Self::BadRequest => "Bad request",
            Self::NotFound => "Not found",
            Self::ReplayRiskNotAcknowledged => "Replay risk not acknowledged",
            Self::NotUnknown => "Record is not in the unknown state",
            Self::MethodNotAllowed => "Method not allowed",
            Self::StorageQuota => "Storage quota reached",
        }
    }

    /// The `type` URI: a stable, documented identifier per code.
    pub fn type_uri(self) -> String {
        format!("https://keyflight.dev/problems/{}", self.as_str())
    }

    /// The HTTP status of this problem under keyflight's own status
    /// profile: the one table, for the filter's replies and the
    /// lease-store's answers alike.
    pub fn status(self) -> u16 {
        match self {
            Self::IdempotencyKeyRequired
            | Self::IdempotencyKeyInvalid
            | Self::PrincipalAmbiguous
            | Self::BadRequest
            | Self::ReplayRiskNotAcknowledged => 400,
            Self::PrincipalRequired | Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::IdempotencyConflict
            | Self::ResponseNotReplayable
            | Self::OperationUnknown
            | Self::LeaseLost
            | Self::NotUnknown => 409,
            Self::PayloadTooLarge => 413,
            Self::JournalUnavailable | Self::RequestInProgress | Self::RetryableCooldown => 503,
            Self::StorageQuota => 507,
        }
    }

    /// The HTTP status under `profile`: the IETF draft answers a request
    /// still in flight with 409 and a reused key with 422; every other code
    /// keeps [`ProblemCode::status`].
    pub fn status_under(self, profile: StatusProfile) -> u16 {
        match (profile, self) {
            (StatusProfile::Ietf, Self::RequestInProgress) => 409,
            (StatusProfile::Ietf, Self::IdempotencyConflict) => 422,
            _ => self.status(),
        }
    }
}

/// F10: which HTTP status a few problems get (the filter's `status_profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusProfile {
    /// keyflight's own: in-flight → 503 + Retry-After, payload mismatch → 409.
    #[default]
    Keyflight,
    /// The IETF draft's: in-flight → 409, payload mismatch → 422.
    Ietf,
}

/// The `Retry-After` seconds of a problem answer with `status`: the
/// suggested wait, at least one second, and one second for any 503 without
/// a suggestion — a 503 without it would invite an immediate retry storm.
pub fn retry_after_s(status: u16, suggested: Option<u64>) -> Option<u64> {
    match suggested {
        Some(s) => Some(s.max(1)),
        None if status == 503 => Some(1),
        None => None,
    }
}

/// An RFC 9457 problem details body, `application/problem+json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// URI identifying the problem type.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// Short summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What happened in this occurrence.
    pub detail: String,
    /// Stable machine-readable code.
    pub code: ProblemCode,
}

impl Problem {
    /// Builds a problem with the code's title and type URI.
    pub fn new(code: ProblemCode, status: u16, detail: impl Into<String>) -> Self {
        Problem {
            type_uri: code.type_uri(),
            title: code.title().to_owned(),
            status,
            detail: detail.into(),
            code,
        }
    }
}

/// Media type of problem details (RFC 9457 §3).
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";
