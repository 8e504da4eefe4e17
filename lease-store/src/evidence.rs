//! Evidence lines: one log event per fact a history checker (or an operator
//! reconstructing what happened to one record) needs — which claim won a
//! scope, with which fence, and *how* (a fresh insert, a takeover of an
//! expired lease, the reuse of a record past its retention), which renews
//! extended a lease, which settle calls the store applied or refused, and each
//! operator change (an erase, a resolve) that committed.
//!
//! They go through the store's one log (`logging.rs`: text, or JSON lines with
//! `KEYFLIGHT_LOG_FORMAT=json`) under the target `keyflight_lease_store::evidence`,
//! with stable field names: `evidence` (`claim_won`, `renewed`, `settle`, `operator` or
//! `lapse_held`), `scope` and `fingerprint` (digests), `claim_id` and `fence`, `lease_ms`,
//! `at_most_once` (the claim's policy holds uncertain outcomes: its lapsed lease is never
//! taken over), `how` (the wire's [`WonHow`] spelling; a reader must treat a value it does
//! not know as a new way to win), `call` (`finalize`, `finalize_not_replayable`,
//! `release_cooldown`, `release_unknown`, `release_forget`, and `release_orphan`: a claim won
//! for a caller that went away, released by the store itself, with what it `leaves` of the
//! record: `no_record`, or `failed` for a takeover given back) and `outcome` (`applied`,
//! `lease_lost`, `refused`) — a release's line also says whether it was a `repeat` and when
//! the database applied it and ends its cooldown ([`released`]) — and for an operator
//! change `action` (the audit's: `erase`, `resolve_completed`, `resolve_failed`) and
//! `operator`. A claim id is a fencing token, not a credential: every write also needs the
//! bearer token, which is never logged (`docs/configuration.md#logs`). Answers other than a
//! win or an extended lease, and settle calls the database never answered, are not facts
//! about the record and are not logged here.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, ReleaseAs, RenewRequest, RenewResponse, ResolveAs, WonHow,
};
use uuid::Uuid;

use std::time::{SystemTime, UNIX_EPOCH};

use crate::store::{Released, StoreError};

/// Logs a won claim.
pub fn claim_answered(scope: &Digest, request: &ClaimRequest, response: &ClaimResponse) {
    claim_won(scope, &request.fingerprint, request.at_most_once, response);
}

/// Logs a won claim of `fingerprint`, also one won for a caller that went away (an
/// orphan, logged before its release: `store/orphan.rs`).
pub fn claim_won(
    scope: &Digest,
    fingerprint: &Digest,
    at_most_once: bool,
    response: &ClaimResponse,
) {
    if let ClaimResponse::Won {
        claim_id,
        fence,
        how,
        lease_ms,
    } = response
    {
        tracing::info!(
            evidence = "claim_won",
            scope = %scope.to_hex(),
            fingerprint = %fingerprint.to_hex(),
            %claim_id,
            fence,
            how = WonHow::as_str(*how),
            lease_ms,
            at_most_once,
            "claim won"
        );
    }
}

/// Logs a renew that extended its claim's lease. A judge times the lease's end from the
/// last of these (`chaos/src/checker/partition.rs`): without them it could not tell a
/// proxy cut off right after its last renew from one that had stopped renewing.
pub fn renewed(scope: &Digest, request: &RenewRequest, answer: &Result<RenewResponse, StoreError>) {
    if answer.is_ok() {
        tracing::info!(
            evidence = "renewed",
            scope = %scope.to_hex(),
            claim_id = %request.claim_id,
            lease_ms = request.lease_ms,
            "lease renewed"
        );
    }
}

/// Logs an orphan claim the store released (`store/orphan.rs`): won in the database, its
/// answer never handed to the caller, so no proxy holds its claim id or forwarded its
/// request. A `settle` line (`call=release_orphan`, with the fence it released), so a judge
/// reads it as that claim released unrun (`chaos/src/checker/evidence.rs`).
pub fn orphan_released(scope: &Digest, claim_id: Uuid, fence: i64, leaves: &str) {
    tracing::info!(
        evidence = "settle",
        scope = %scope.to_hex(),
        %claim_id,
        call = "release_orphan",
        outcome = "applied",
        fence,
        leaves,
        "released an orphan claim: it committed, and its caller never got the answer"
    );
}

/// The name a settle call goes by in evidence lines.
pub fn finalize_call(replayable: bool) -> &'static str {
    match replayable {
        true => "finalize",
        false => "finalize_not_replayable",
    }
}

/// The name a release goes by in evidence lines.
pub fn release_call(release_as: ReleaseAs) -> &'static str {
    match release_as {
        ReleaseAs::Cooldown => "release_cooldown",
        ReleaseAs::Unknown => "release_unknown",
        ReleaseAs::Forget => "release_forget",
    }
}

/// Logs what became of a settle call `call` of claim `claim_id`: applied (a
/// repeat of one that landed is applied again), `lease_lost`, or refused.
pub fn settled<T>(scope: &Digest, claim_id: Uuid, call: &str, answer: &Result<T, StoreError>) {
    if let Some(outcome) = settle_outcome(answer) {
        settle_line(scope, claim_id, call, outcome, None);
    }
}

/// [`settled`] for a release, with what the database stamped on the record
/// ([`Released`]): `repeat`, and as Unix milliseconds `released_at_unix_ms` and
/// `cooldown_ends_at_unix_ms` when known. A judge times the record's freedom from these,
/// not from the line's own time: the store may be frozen between its commit and this line.
pub fn released(scope: &Digest, claim_id: Uuid, call: &str, answer: &Result<Released, StoreError>) {
    if let Some(outcome) = settle_outcome(answer) {
        settle_line(scope, claim_id, call, outcome, answer.as_ref().ok());
    }
}

/// One `settle` line; a release's stamps, when given (absent fields are not logged).
fn settle_line(
    scope: &Digest,
    claim_id: Uuid,
    call: &str,
    outcome: &str,
    released: Option<&Released>,
) {
    let unix_ms = |at: Option<SystemTime>| {
        at.and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .and_then(|since| u64::try_from(since.as_millis()).ok())
    };
    tracing::info!(
        evidence = "settle",
        scope = %scope.to_hex(),
        %claim_id,
        call,
        outcome,
        repeat = released.map(|r| r.repeat),
        released_at_unix_ms = unix_ms(released.and_then(|r| r.at)),
        cooldown_ends_at_unix_ms = unix_ms(released.and_then(|r| r.cooldown_ends_at)),
        "settle {outcome}"
    );
}

/// The `outcome` of a settle call's answer; `None` for an answer that is no fact about
/// the record (the database never answered).
fn settle_outcome<T>(answer: &Result<T, StoreError>) -> Option<&'static str> {
    Some(match answer {
        Ok(_) => "applied",
        Err(StoreError::LeaseLost) => "lease_lost",
        Err(
            StoreError::Invalid(_)
            | StoreError::Rejected(_)
            | StoreError::NotFound
            | StoreError::NotUnknown,
        ) => "refused",
        Err(StoreError::Unavailable(_) | StoreError::ReadOnly(_)) => return None,
    })
}

/// The audit's name of a resolution (`keyflight_operator_audit.action`).
pub fn resolve_action(resolve_as: ResolveAs) -> &'static str {
    match resolve_as {
        ResolveAs::Completed => "resolve_completed",
        ResolveAs::Failed => "resolve_failed",
    }
}

/// Logs an operator change that committed: `action` (the audit's name for it) on `scope`
/// by `operator`.
pub fn operator_changed(scope: &Digest, action: &str, operator: &str) {
    tracing::info!(
        evidence = "operator",
        scope = %scope.to_hex(),
        action,
        operator,
        "operator change {action}"
    );
}

/// Logs a lapsed at-most-once lease made `unknown` (`docs/records.md#a-lapsed-at-most-once-lease`):
/// the claim of `fence` on `scope` is held, not taken over.
pub fn lapse_held(scope: &Digest, fence: i64) {
    tracing::info!(
        evidence = "lapse_held",
        scope = %scope.to_hex(),
        fence,
        "lapsed at-most-once lease held as unknown"
    );
}
