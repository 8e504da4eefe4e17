//! The claim call (`POST /v1/claims/{scope}`): what a proxy asks, how it won or what it
//! learned instead, and the recorded response a replay carries, with the one encoding of
//! its body (`body_b64`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::integral;
// Named by the field docs' links (kept as they were: utoipa turns them into the
// OpenAPI document's descriptions).
#[cfg(doc)]
use super::{MAX_LEASE_MS, MAX_RETENTION_S, MAX_WAIT_MS};
use crate::Digest;

/// `POST /v1/claims/{scope}`: claim the lease on a scope, or learn its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The request fingerprint (K4) the caller wants to run.
    pub fingerprint: Digest,
    /// Lease length granted to a winner, in milliseconds (1 to [`MAX_LEASE_MS`]).
    #[serde(deserialize_with = "integral::u64")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86_400_000))]
    pub lease_ms: u64,
    /// Long-poll budget for a same-fingerprint pending record (F5, L4; at
    /// most [`MAX_WAIT_MS`]). `0` or absent: answer at once.
    #[serde(
        default,
        deserialize_with = "integral::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(maximum = 86_400_000))]
    pub wait_ms: Option<u64>,
    /// Record retention for this scope, in seconds (L5; 1 to [`MAX_RETENTION_S`]).
    /// Absent: the store's default.
    #[serde(
        default,
        deserialize_with = "integral::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 315_360_000_u64))]
    pub retention_s: Option<u64>,
    /// During a recipe transition: the same request's identity under the policy's
    /// previous recipe, claimed together with this one
    /// (`docs/records.md#claims-across-a-recipe-change`). A store that predates it refuses
    /// the claim (unknown field) rather than claim one scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousIdentity>,
    /// The claim is made under an at-most-once policy (`uncertain: hold` or `record`): if
    /// its lease lapses, the record becomes `unknown` instead of being taken over
    /// (`docs/records.md#a-lapsed-at-most-once-lease`). Absent: `false`, the claim of a filter
    /// that predates it; sent only when `true`, so such claims reach a store that predates
    /// it unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_most_once: bool,
}

/// A request's scope and fingerprint under the previous recipe of its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PreviousIdentity {
    /// The scope digest under the previous recipe.
    pub scope: Digest,
    /// The fingerprint under the previous recipe.
    pub fingerprint: Digest,
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
    /// The outcome is uncertain and needs an operator or the service's word (`unknown`
    /// state).
    Unknown {
        /// The fence of the run whose outcome is uncertain: what a filter asks the service
        /// about under `uncertain: reconcile` (`wire::reconcile`). Absent from a store that
        /// predates it; a filter that predates it ignores it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<i64>,
    },
}

/// What `POST /v1/claims/{scope}` sends: the outcome, and for a `completed`
/// one, how long the record has left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimAnswer {
    /// The outcome (its fields at the top level, next to `outcome`).
    #[serde(flatten)]
    pub response: ClaimResponse,
    /// `completed`: the record's retention left when the store read it, in
    /// milliseconds, by the database's clock. An edge serves a cached replay no
    /// longer than this from before it asked, so it never replays a record the
    /// store may already have deleted or reused (F9). Absent (a store that
    /// predates it, or an answer after a long-poll): the replay is not cached.
    #[serde(
        default,
        deserialize_with = "integral::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub record_expires_in_ms: Option<u64>,
    /// `won`: milliseconds from the store receiving the claim to its sending the statement
    /// that won (the lease started no earlier), by the store's clock. The proxy subtracts it
    /// from the call's round trip to bound how old the lease is when the answer arrives
    /// (`docs/stream-machine.md#the-claim`). Absent (a store that predates it): the whole
    /// round trip counts.
    #[serde(
        default,
        deserialize_with = "integral::option_u64",
        skip_serializing_if = "Option::is_none"
    )]
    pub claimed_after_ms: Option<u64>,
}

// The body is bytes here; on the wire it is the `body_b64` string (standard
// base64 with padding), decoded once, when the JSON is read, so no caller
// holds a body it still has to decode (or could fail to). (A plain comment:
// the doc comment below is the OpenAPI schema's description.)
/// A recorded upstream response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StoredResponse {
    /// HTTP status code (100–599).
    #[serde(deserialize_with = "integral::u16")]
    #[cfg_attr(feature = "openapi", schema(minimum = 100, maximum = 599))]
    pub status: u16,
    /// Allowlisted headers, lowercase names, in order; each passes the
    /// recorded-header rule ([`crate::headers`]).
    pub headers: Vec<(String, String)>,
    /// The body, standard base64 with padding.
    #[serde(rename = "body_b64", with = "base64_body")]
    #[cfg_attr(
        feature = "openapi",
        schema(
            value_type = String,
            pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
        )
    )]
    pub body: Vec<u8>,
}

impl StoredResponse {
    /// A stored response with a copy of `body`.
    pub fn new(status: u16, headers: Vec<(String, String)>, body: &[u8]) -> Self {
        StoredResponse {
            status,
            headers,
            body: body.to_vec(),
        }
    }

    /// The length of the body as the wire carries it (`body_b64`).
    pub fn encoded_body_len(&self) -> usize {
        let len = base64_len(u64::try_from(self.body.len()).unwrap_or(u64::MAX));
        usize::try_from(len).unwrap_or(usize::MAX)
    }
}

/// The length of `n` bytes in standard base64 with padding: what a recorded
/// body costs inside a finalize.
pub fn base64_len(n: u64) -> u64 {
    n.div_ceil(3).saturating_mul(4)
}

/// `body_b64`: the one place a recorded body is encoded and decoded.
mod base64_body {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(body: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(body))
    }

    /// The error names no part of the text: it may be a recorded body.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(|_| de::Error::custom("not valid base64 (standard alphabet, with padding)"))
    }
}
