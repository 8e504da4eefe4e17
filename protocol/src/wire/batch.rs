//! `POST /v1/batch/claims` and `POST /v1/batch/finalizes`: many claims (finalizes) in one
//! HTTP exchange (`docs/records.md#batches`).
//!
//! An edge worker coalesces the claims its streams make in one event-loop turn into one
//! batch (`docs/stream-machine.md#coalesced-calls`). A batch changes only the transport:
//! each call is answered exactly as its single route would answer it — the same status and
//! the same body, carried verbatim — so the code that reads a single answer reads each of
//! a batch's. A batch never long-polls: a claim in it that asks to wait is refused, and the
//! edge asks again alone.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{ClaimRequest, FinalizeRequest};
use crate::Digest;

/// The most calls one batch may carry.
pub const MAX_BATCH_CALLS: usize = 64;

/// `POST /v1/batch/claims`: the claims, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimBatch {
    /// 1 to [`MAX_BATCH_CALLS`] claims.
    pub calls: Vec<BatchedClaim>,
}

/// One claim of a [`ClaimBatch`]: what `POST /v1/claims/{scope}` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchedClaim {
    /// The scope digest (the single route's path parameter).
    pub scope: Digest,
    /// The single route's body; `wait_ms` absent or 0.
    pub request: ClaimRequest,
}

/// `POST /v1/batch/finalizes`: the finalizes, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FinalizeBatch {
    /// 1 to [`MAX_BATCH_CALLS`] finalizes.
    pub calls: Vec<BatchedFinalize>,
}

/// One finalize of a [`FinalizeBatch`]: what `POST /v1/claims/{scope}/finalize` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchedFinalize {
    /// The scope digest (the single route's path parameter).
    pub scope: Digest,
    /// The single route's body.
    pub request: FinalizeRequest,
}

/// A batch's answer (status 200): one answer per call, in the calls' order. `B` is the
/// body's representation: owned on the store's side, borrowed from the answer on the edge.
#[derive(Debug, Serialize, Deserialize)]
pub struct BatchAnswer<B> {
    /// As many as the batch had calls.
    pub answers: Vec<BatchedAnswer<B>>,
}

/// What the single route would have answered for one call.
#[derive(Debug, Serialize, Deserialize)]
pub struct BatchedAnswer<B> {
    /// The single route's HTTP status.
    pub status: u16,
    /// The single route's body, as JSON (a problem for an error status); `null` where the
    /// single route answers with no body (a finalize's 200).
    pub body: B,
}

/// A batch answer as the store writes it.
pub type OwnedBatchAnswer = BatchAnswer<Box<RawValue>>;

/// A batch answer as the edge reads it, each body a slice of the answer.
pub type BorrowedBatchAnswer<'a> = BatchAnswer<&'a RawValue>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_carries_each_body_verbatim() {
        let text = r#"{"answers":[{"status":200,"body":{"outcome":"conflict"}},{"status":409,"body":{"type":"x","code":"lease_lost"}},{"status":200,"body":null}]}"#;
        let answer: BorrowedBatchAnswer<'_> = serde_json::from_str(text).unwrap();
        let bodies: Vec<(u16, &str)> = answer
            .answers
            .iter()
            .map(|a| (a.status, a.body.get()))
            .collect();
        assert_eq!(
            bodies,
            [
                (200, r#"{"outcome":"conflict"}"#),
                (409, r#"{"type":"x","code":"lease_lost"}"#),
                (200, "null"),
            ]
        );
        let owned: OwnedBatchAnswer = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&owned).unwrap(), text);
    }
}
