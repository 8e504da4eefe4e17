//! How the outbox delivers a settle call: what to do after it failed, the
//! backoff before the next attempt, and what a delivery costs against the
//! outbox's byte bound (F14, `docs/record-outbox.md#delivery`).
//!
//! Jitter is derived from the claim id and the attempt number, not from a
//! random source, so every schedule is a plain unit test and claims that
//! failed together still spread out.

use keyflight_protocol::wire::{FinalizeRequest, StoredResponse};
use uuid::Uuid;

use crate::store_call::{CallError, StoreCall};

/// First retry delay after a failed settle call (before jitter).
pub(crate) const BACKOFF_BASE_MS: u64 = 100;

/// Longest retry delay: once the store is back, a waiting record lands within
/// about this long (plus one tick), well inside any lease a policy may set.
pub(super) const BACKOFF_CAP_MS: u64 = 2000;

/// What an entry costs beyond its call's response bytes (ids, schedule,
/// headers' framing): a floor, so the byte bound also bounds the entry count.
pub(super) const ENTRY_OVERHEAD_BYTES: usize = 256;

/// What to do after a settle call failed with `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Transient: send it again later.
    Retry,
    /// The store will never take this finalize: send the lesser one at once.
    Downgrade(StoreCall),
    /// Another claim owns the record.
    Lost,
    /// The store will never take it, and there is nothing lesser to send.
    GiveUp,
}

pub(super) fn next_step(call: &StoreCall, error: CallError) -> Step {
    match error {
        CallError::LeaseLost => Step::Lost,
        // 413: over the store's body limit; 400: a response it refuses to keep.
        CallError::Status(400 | 413) => downgraded(call).map_or(Step::GiveUp, Step::Downgrade),
        // No connection, a timeout, 5xx (503 `journal_unavailable`), 429, and
        // anything else the store may answer while it restarts or is
        // reconfigured (401/403 during a token rotation): within the budget,
        // try again.
        CallError::Dispatch
        | CallError::NoAnswer
        | CallError::Status(_)
        | CallError::Malformed
        | CallError::MalformedRecord => Step::Retry,
    }
}

/// The not-replayable finalize that replaces a replayable one the store
/// cannot keep: the record still says "completed", so a retry gets 409
/// `response_not_replayable` and never runs again. `None` for a release or
/// a finalize that is already as small as it gets.
pub(super) fn downgraded(call: &StoreCall) -> Option<StoreCall> {
    let StoreCall::Finalize { scope, request } = call else {
        return None;
    };
    let lesser = StoredResponse::new(request.response.status, Vec::new(), &[]);
    if !request.replayable && request.response == lesser {
        return None;
    }
    Some(StoreCall::Finalize {
        scope: *scope,
        request: FinalizeRequest {
            claim_id: request.claim_id,
            response: lesser,
            replayable: false,
            previous_scope: request.previous_scope,
        },
    })
}

/// What a delivery of `call` counts against the byte bound.
pub(super) fn delivery_bytes(call: &StoreCall) -> usize {
    let response = match call {
        StoreCall::Finalize { request, .. } => {
            let headers: usize = request
                .response
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum();
            request.response.encoded_body_len() + headers
        }
        StoreCall::Claim { .. }
        | StoreCall::Renew { .. }
        | StoreCall::Release { .. }
        | StoreCall::Reconciled { .. } => 0,
    };
    ENTRY_OVERHEAD_BYTES + response
}

/// The delay before settle attempt `attempt` (1 = the first retry): doubling
/// from [`BACKOFF_BASE_MS`] up to [`BACKOFF_CAP_MS`], then scaled into
/// [50 %, 100 %] by a hash of the claim and the attempt ("equal jitter").
pub(super) fn backoff_ms(claim_id: Uuid, attempt: u32) -> u64 {
    let exponent = attempt.saturating_sub(1).min(16);
    let ceiling = BACKOFF_BASE_MS
        .saturating_mul(1 << exponent)
        .min(BACKOFF_CAP_MS);
    let half = ceiling / 2;
    half + jitter(claim_id, attempt) % (half + 1)
}

/// FNV-1a over the claim id and the attempt: cheap, deterministic spread.
pub(super) fn jitter(claim_id: Uuid, attempt: u32) -> u64 {
    claim_id
        .as_bytes()
        .iter()
        .chain(attempt.to_le_bytes().iter())
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}
