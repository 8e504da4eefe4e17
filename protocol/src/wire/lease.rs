//! The calls that keep or end a won claim's lease: renew it, finalize it with the
//! upstream's answer, or release it unrecorded (`docs/records.md#the-api`). Each is fenced
//! by the claim id.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{StoredResponse, integral};
// Named by the field docs' links (kept as they were: utoipa turns them into the
// OpenAPI document's descriptions).
#[cfg(doc)]
use super::{MAX_COOLDOWN_MS, MAX_LEASE_MS};
use crate::Digest;

/// `POST /v1/claims/{scope}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The caller's claim.
    pub claim_id: Uuid,
    /// New lease length from now, in milliseconds (1 to [`MAX_LEASE_MS`]).
    #[serde(deserialize_with = "integral::u64")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400_000))]
    pub lease_ms: u64,
    /// The previous recipe's scope a dual claim also holds: settled with this one, in
    /// one transaction (`docs/records.md#claims-across-a-recipe-change`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_scope: Option<Digest>,
}

/// Answer to a successful renew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RenewResponse {
    /// The lease now granted, in milliseconds.
    pub lease_ms: u64,
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
    /// The previous recipe's scope a dual claim also holds: settled with this one, in
    /// one transaction (`docs/records.md#claims-across-a-recipe-change`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_scope: Option<Digest>,
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
    /// Delete the record: nothing was recorded (a policy's `forget_statuses`).
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
    /// Cooldown for `as: cooldown`, in milliseconds (at most [`MAX_COOLDOWN_MS`]).
    /// Absent: the store's default.
    #[serde(
        default,
        deserialize_with = "integral::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 86_400_000))]
    pub cooldown_ms: Option<u64>,
    /// The previous recipe's scope a dual claim also holds: settled with this one, in
    /// one transaction (`docs/records.md#claims-across-a-recipe-change`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_scope: Option<Digest>,
}
