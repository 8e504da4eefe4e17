//! What the decisions ask the host to log: the severity of a line, and the
//! shape of an *evidence* line. Both are part of the decisions' vocabulary
//! ([`crate::machine::Action`], the outbox's actions), performed by the
//! drivers through [`crate::drive::host::Host::log`].
//!
//! A warning whose cause fails every request alike (a lease-store outage)
//! is [`Repeating`]: the worker lets one line per kind through each
//! [`REPEAT_INTERVAL_MS`] and says in the next how many it held back
//! ([`LogLimit`], with the time passed in); the metrics still count every
//! request (`docs/stream-machine.md#logs`).
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

/// A warning that repeats once per request for as long as its cause lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeating {
    /// A claim the lease-store did not answer (F2): during an outage, every guarded request.
    ClaimFailed,
    /// A lease-store that predates recipe transitions refused a dual claim: until it is
    /// rolled out, every guarded request of a policy naming a previous recipe.
    PreviousRecipeRefused,
    /// Under `uncertain: reconcile`, the service gave no usable answer about an `unknown`
    /// record: while it is down, every retry of such a record.
    ReconcileUnanswered,
}

/// At most one line of each [`Repeating`] kind per this long, per worker: the
/// lease-store's interval.
pub const REPEAT_INTERVAL_MS: u64 = 1000;

/// One worker's rate limit on [`Repeating`] warnings: a window per kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogLimit {
    claim_failed: Window,
    previous_recipe_refused: Window,
    reconcile_unanswered: Window,
}

impl LogLimit {
    /// `Some(suppressed)` when a `kind` line may go out at `now_ms` (with how many were
    /// held back since the last one), `None` when it is held back.
    pub fn admit(&mut self, kind: Repeating, now_ms: u64) -> Option<u64> {
        match kind {
            Repeating::ClaimFailed => self.claim_failed.admit(now_ms),
            Repeating::PreviousRecipeRefused => self.previous_recipe_refused.admit(now_ms),
            Repeating::ReconcileUnanswered => self.reconcile_unanswered.admit(now_ms),
        }
    }
}

/// One kind's interval: when its last line went out, and what was held back since.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    last_ms: Option<u64>,
    suppressed: u64,
}

impl Window {
    fn admit(&mut self, now_ms: u64) -> Option<u64> {
        // A host clock that stepped back starts a new interval rather than holding lines
        // back until it catches up.
        if self
            .last_ms
            .is_some_and(|last| (last..last.saturating_add(REPEAT_INTERVAL_MS)).contains(&now_ms))
        {
            self.suppressed += 1;
            return None;
        }
        self.last_ms = Some(now_ms);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// `message`, saying how many lines like it were held back before it.
pub fn with_suppressed(message: &str, suppressed: u64) -> String {
    match suppressed {
        0 => message.to_owned(),
        n => format!("{message} ({n} more like it since the last one, not logged)"),
    }
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
        StoreCall::Reconciled { .. } => "reconciled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_carries_the_suppressed_count() {
        let start = 5_000;
        let mut limit = LogLimit::default();
        let mut admit = |at: u64| limit.admit(Repeating::ClaimFailed, at);
        assert_eq!(admit(start), Some(0));
        for n in 1..=5 {
            assert_eq!(admit(start + n * 100), None);
        }
        assert_eq!(admit(start + REPEAT_INTERVAL_MS), Some(5));
        assert_eq!(admit(start + REPEAT_INTERVAL_MS), None);
        assert_eq!(admit(start + 3 * REPEAT_INTERVAL_MS), Some(1));
        assert_eq!(admit(start + 3 * REPEAT_INTERVAL_MS + 1), None);
        // A clock that stepped back lets the next line through.
        assert_eq!(admit(start), Some(1));
    }

    #[test]
    fn kinds_are_limited_apart() {
        let mut limit = LogLimit::default();
        assert_eq!(limit.admit(Repeating::ClaimFailed, 0), Some(0));
        assert_eq!(limit.admit(Repeating::PreviousRecipeRefused, 0), Some(0));
        assert_eq!(limit.admit(Repeating::ClaimFailed, 1), None);
    }
}
