//! Lease-store HTTP API v1 wire types (`docs/records.md#the-api`).
//!
//! The filter, the lease-store and its CLI all speak through these types, so
//! a field renamed here is renamed everywhere at once. Field names and outcome
//! spellings are the contract: change them only with a new API version.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Digest;

pub mod batch;
pub mod framed;
pub mod reconcile;

/// The longest lease a claim or renew may ask for (one day, in milliseconds):
/// far above any policy (the filter allows an hour), and small enough that
/// lease arithmetic in the database can never overflow.
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// The longest retention a claim may ask for (ten years, in seconds): the longest a
/// filter policy may ask for; the store's `--max-retention` may lower it.
pub const MAX_RETENTION_S: u64 = 315_360_000;
/// The longest cooldown a release may ask for (one day, in milliseconds).
pub const MAX_COOLDOWN_MS: u64 = 86_400_000;
/// The longest long-poll a claim may ask for (one day, in milliseconds); the
/// store waits no longer than its own `--max-wait` anyway.
pub const MAX_WAIT_MS: u64 = 86_400_000;
/// The longest reason an operator may give for an erase or a resolve, in characters.
pub const MAX_REASON_CHARS: usize = 1000;
/// Recorded status codes are final HTTP status codes (RFC 9110 §15).
pub const RECORDED_STATUS: std::ops::RangeInclusive<u16> = 100..=599;

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

/// JSON has one number type, and to JSON Schema (hence to the OpenAPI
/// document) `7.0` and `7e0` are integers just like `7`. Integer fields of
/// requests therefore accept any number without a fractional part that fits
/// the field; `7.5`, negative numbers and strings are still refused.
pub(crate) mod integral {
    use serde::de::{self, Deserializer, Visitor};

    struct Integral;

    impl Visitor<'_> for Integral {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a non-negative integer")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            // 2^64 is exact as an f64; every integral f64 below it converts exactly.
            if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
                Ok(v as u64)
            } else {
                Err(E::invalid_value(de::Unexpected::Float(v), &self))
            }
        }
    }

    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Integral)
    }

    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let v = d.deserialize_any(Integral)?;
        i64::try_from(v).map_err(|_| {
            de::Error::invalid_value(de::Unexpected::Unsigned(v), &"an integer up to 2^63 - 1")
        })
    }

    pub fn u16<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        let v = d.deserialize_any(Integral)?;
        u16::try_from(v).map_err(|_| {
            de::Error::invalid_value(de::Unexpected::Unsigned(v), &"an integer up to 65535")
        })
    }

    pub fn option_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        struct Optional;
        impl<'de> Visitor<'de> for Optional {
            type Value = Option<u64>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a non-negative integer or null")
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                u64(d).map(Some)
            }
        }
        d.deserialize_option(Optional)
    }
}

/// Header the admin erase call must carry (L6).
pub const ACK_REPLAY_RISK_HEADER: &str = "keyflight-ack-replay-risk";

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(json: &str) -> Result<ClaimRequest, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn integer_fields_take_any_integral_number_and_nothing_else() {
        let fp = "0".repeat(64);
        let ok = claim(&format!(
            r#"{{"fingerprint":"{fp}","lease_ms":7.0,"wait_ms":1e3,"retention_s":null}}"#
        ))
        .unwrap();
        assert_eq!(
            (ok.lease_ms, ok.wait_ms, ok.retention_s),
            (7, Some(1000), None)
        );
        for bad in ["7.5", "-1", "-1.0", "\"7\"", "1e20", "true"] {
            let err = claim(&format!(r#"{{"fingerprint":"{fp}","lease_ms":{bad}}}"#)).unwrap_err();
            assert!(err.contains("integer"), "{bad}: {err}");
        }
        let status: Result<StoredResponse, _> =
            serde_json::from_str(r#"{"status":201.0,"headers":[],"body_b64":""}"#);
        assert_eq!(status.unwrap().status, 201);
        let status: Result<StoredResponse, _> =
            serde_json::from_str(r#"{"status":65536,"headers":[],"body_b64":""}"#);
        assert!(status.is_err());
    }
}
