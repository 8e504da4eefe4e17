//! The stable error codes of RFC 9457 problem details (F10, SPEC §6).
//!
//! Both the filter's local replies and the lease-store's errors use these
//! codes, so one enum keeps their spelling identical everywhere.

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
        }
    }

    /// The `type` URI: a stable, documented identifier per code.
    pub fn type_uri(self) -> String {
        format!("https://keyflight.dev/problems/{}", self.as_str())
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
