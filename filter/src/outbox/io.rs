//! What goes into the outbox and what comes out: a won claim's [`Lease`] and a stream's
//! [`Handoff`] in, [`OutboxAction`]s out, a [`CallId`] naming each call so its answer finds
//! its entry — plus the view of an entry tests get. Kept apart from the entries' rules so
//! the outbox's contract with the root context reads in one place.

use std::time::Duration;

use keyflight_protocol::Digest;
use uuid::Uuid;

use crate::log::LogLevel;
use crate::metrics::{EventKind, Gauge, Metric, OutboxEvent};
use crate::store_call::{CallError, StoreCall};

/// A won claim to renew (the stream's `StartRenewal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The scope digest.
    pub scope: Digest,
    /// The previous recipe's scope a dual claim also holds: renewed with it.
    pub previous_scope: Option<Digest>,
    /// The claim, which fences every call.
    pub claim_id: Uuid,
    /// Lease length asked for on each renew.
    pub lease: Duration,
    /// Renew period.
    pub interval: Duration,
    /// How long before the stream heard of it the claim was sent: the store
    /// started the lease no earlier than that, so the first renew is due one
    /// interval after the send, not after the answer.
    pub age: Duration,
}

/// A settle call the stream could not see through (the stream's `HandOff`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The claim the call settles.
    pub claim_id: Uuid,
    /// That claim's fence: evidence lines name it.
    pub fence: i64,
    /// The finalize or release to (re)send.
    pub call: StoreCall,
    /// How the stream's own attempt ended: `None` when it never saw an answer
    /// (the call was cancelled with the stream, or never made).
    pub last_error: Option<CallError>,
    /// How long the outbox keeps trying (the policy's `record_retry_budget_ms`).
    pub budget: Duration,
}

/// Which of an entry's calls an answer belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallKind {
    /// A lease renewal.
    Renew,
    /// The finalize or release the outbox is delivering.
    Settle,
}

/// Names one call the outbox asked the adapter to dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CallId {
    /// The claim.
    pub claim_id: Uuid,
    /// Which call.
    pub kind: CallKind,
}

/// Something the adapter must do for the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboxAction {
    /// Dispatch `call` from the root context and report its answer with
    /// [`Outbox::on_answer`](super::Outbox::on_answer) under `id` (a dispatch that fails at once is
    /// answered with [`CallError::Dispatch`]).
    Dispatch {
        /// Names the answer.
        id: CallId,
        /// The call.
        call: StoreCall,
    },
    /// Increment a counter.
    Count(Metric),
    /// Add `delta` to a gauge (workers share one gauge, so each adds its own change).
    Adjust {
        /// Which gauge.
        gauge: Gauge,
        /// Signed change.
        delta: i64,
    },
    /// Write a log line (digests only).
    Log {
        /// Severity.
        level: LogLevel,
        /// The message.
        message: String,
    },
}

/// What the outbox holds for one claim, as a test sees it.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// Its lease is renewed.
    pub renewing: bool,
    /// The settle call it delivers, once the stream handed the claim off.
    pub delivery: Option<HeldDelivery>,
}

/// A delivery, as a test sees it.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldDelivery {
    /// The finalize or release it sends.
    pub call: StoreCall,
    /// When it is sent next.
    pub next_attempt_ms: u64,
    /// When the budget runs out.
    pub give_up_at_ms: u64,
}

/// A byte count as a gauge change.
pub(super) fn signed(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

pub(super) fn count(event: EventKind) -> OutboxAction {
    OutboxAction::Count(Metric::Event(event))
}

pub(super) fn outbox_count(event: OutboxEvent) -> OutboxAction {
    OutboxAction::Count(Metric::Outbox(event))
}

pub(super) fn adjust(gauge: Gauge, delta: i64) -> OutboxAction {
    OutboxAction::Adjust { gauge, delta }
}

pub(super) fn log(level: LogLevel, message: String) -> OutboxAction {
    OutboxAction::Log { level, message }
}
