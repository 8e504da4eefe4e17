//! What the decisions ask the host to log: the severity of a line, and the
//! shape of an *evidence* line. Both are part of the decisions' vocabulary
//! ([`crate::machine::Action`], the outbox's actions), performed by the
//! drivers through [`crate::drive::host::Host::log`].
//!
//! An evidence line records one fact about a claim's settle call — it was
//! handed to the outbox, it landed (and whether the stream or the outbox
//! delivered it), the outbox gave it up, the lease was lost, or the plugin
//! was retired with the call still in its outbox — or that a won claim was
//! not forwarded upstream (its release follows), as
//! `evidence=<event> scope=<digest> fence=<n> call=<settle> by=<who>`,
//! then ` | ` and a sentence for the operator. The fields are stable and
//! carry digests and numbers only: the chaos run's judge parses them
//! (`chaos/src/checker/evidence.rs`), and an operator can follow one
//! claim's fence from the lease-store's log through the upstream's.

use keyflight_protocol::wire::ReleaseAs;

use crate::store_call::StoreCall;

/// Log severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Routine.
    Info,
    /// Something an operator may need to look at.
    Warn,
    /// Something is broken (an invalid plugin configuration, a reply that
    /// could not be sent).
    Error,
}

/// What happened to a settle call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The stream handed the claim and its settle call to the outbox.
    HandOff,
    /// The store acknowledged the settle call: the record is settled.
    Landed,
    /// The outbox stopped trying: the lease will expire unsettled.
    GivenUp,
    /// The store answered `lease_lost`: another claim owns the record.
    LeaseLost,
    /// The host retired the root context while the outbox still held the
    /// call: it lives on only while the Wasm VM does (a push of another
    /// module destroys the VM with it).
    Retired,
    /// The claim was won but its request was never forwarded upstream (its
    /// answer came too late to keep the lease); `call` is the release that
    /// follows. A judge may then treat the claim as one that never ran.
    NotForwarded,
}

/// Who made the settle call the line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// The stream, while its caller waited.
    Stream,
    /// The worker's record outbox.
    Outbox,
}

/// One evidence line about `call`, the settle call of the claim `fence`,
/// followed by `note` for the operator.
pub fn evidence(event: Settle, call: &StoreCall, fence: i64, by: By, note: &str) -> String {
    let event = match event {
        Settle::HandOff => "handoff",
        Settle::Landed => "settle_landed",
        Settle::GivenUp => "given_up",
        Settle::LeaseLost => "lease_lost",
        Settle::Retired => "retired",
        Settle::NotForwarded => "not_forwarded",
    };
    let by = match by {
        By::Stream => "stream",
        By::Outbox => "outbox",
    };
    format!(
        "evidence={event} scope={} fence={fence} call={} by={by} | {note}",
        call.scope().to_hex(),
        settle_name(call)
    )
}

/// The settle a call makes, as evidence lines name it.
fn settle_name(call: &StoreCall) -> &'static str {
    match call {
        StoreCall::Finalize { request, .. } if request.replayable => "finalize",
        StoreCall::Finalize { .. } => "finalize_not_replayable",
        StoreCall::Release { request, .. } => match request.release_as {
            ReleaseAs::Cooldown => "release_cooldown",
            ReleaseAs::Unknown => "release_unknown",
            ReleaseAs::Forget => "release_forget",
        },
        StoreCall::Claim { .. } => "claim",
        StoreCall::Renew { .. } => "renew",
    }
}
