//! F14: the per-worker record outbox — won claims that outlive their stream.
//!
//! A claim this proxy won must end in a record (finalize) or a release, or its
//! lease runs out and the next same-body retry runs the operation again. A
//! stream cannot guarantee that on its own: it ends when the caller goes
//! away, and a callout it dispatched is cancelled with it. So every won claim
//! is registered here, in the root context of its worker, which lives as long
//! as the plugin:
//!
//! * while the stream owns the claim, the outbox only renews its lease (F4);
//! * when the stream cannot settle the record itself — its caller left while
//!   the upstream ran or while the answer was being read, its settle call was
//!   in flight when the stream ended, or that call failed for a transient
//!   reason — the stream *hands the claim off*: the outbox keeps renewing the
//!   lease and resends the settle call with capped, jittered exponential
//!   backoff until the store acknowledges it, answers `lease_lost`, or the
//!   policy's retry budget runs out. Finalize, release and renew are fenced by
//!   `claim_id`, and the store answers a repeat of a call that landed with
//!   success, so resending is always safe.
//!
//! A finalize the store refuses for good (413: larger than its body limit;
//! 400: a response it will not store) is *downgraded* to a completed record
//! that is not replayable — no body, no headers — so a retry gets 409
//! `response_not_replayable` instead of running again. The outbox is bounded
//! by bytes: a hand-off that does not fit is downgraded the same way, and only
//! when even that does not fit is the claim given up (counted, logged: its
//! lease expires and one same-body retry may run again).
//!
//! Like the stream machine, the outbox is sans-IO: the root context's driver
//! ([`crate::drive::worker::Root`]) feeds it the time and the answers of the calls
//! it asked for, and performs the [`OutboxAction`]s it returns. This file
//! holds the entries and what streams and ticks do to them; `answers.rs` what
//! the answers do, `io.rs` what goes in and out, `delivery.rs` the retry rules, the backoff and the byte
//! cost (`docs/record-outbox.md`).

mod answers;
mod delivery;
mod io;

use std::collections::BTreeMap;
use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::RenewRequest;
use uuid::Uuid;

pub(crate) use delivery::BACKOFF_BASE_MS;
#[cfg(test)]
use delivery::BACKOFF_CAP_MS;
use delivery::{Step, backoff_ms, delivery_bytes, downgraded, next_step};

pub use io::{CallId, CallKind, Handoff, Lease, OutboxAction};
#[cfg(test)]
pub(crate) use io::{Held, HeldDelivery};
use io::{adjust, count, log, outbox_count, signed};

use crate::log::{By, LogLevel, Settle, evidence};
use crate::metrics::{EventKind, Gauge, OutboxEvent};
use crate::store_call::StoreCall;

/// Renews of one claim that may be in flight at once. A renew stuck on a
/// frozen or slow replica does not hold up the next one: an interval later a
/// second goes out as a new call, which Envoy may route to another host
/// (`docs/record-outbox.md#renewal`).
const MAX_RENEWS_IN_FLIGHT: u8 = 2;

/// A settle call the outbox delivers.
#[derive(Debug, Clone)]
struct Delivery {
    call: StoreCall,
    /// The claim's fence, for the evidence lines.
    fence: i64,
    /// Settle calls the outbox itself has dispatched so far.
    attempts: u32,
    next_attempt_ms: u64,
    give_up_at_ms: u64,
    in_flight: bool,
    /// What this delivery counts against the byte bound.
    bytes: usize,
}

/// One won claim of this worker.
#[derive(Debug, Clone)]
struct Entry {
    scope: Digest,
    previous_scope: Option<Digest>,
    lease: Duration,
    interval_ms: u64,
    next_renew_ms: u64,
    /// Renews sent and not answered yet (at most [`MAX_RENEWS_IN_FLIGHT`]).
    renews_in_flight: u8,
    /// Renews that failed in a row (no answer, 5xx): the next one comes on the
    /// delivery backoff, not a whole interval later.
    renew_failures: u32,
    /// A renew answered `lease_lost`: renewing stops. For a claim the stream
    /// still owns that is the end; a delivery still waits for its own answer
    /// (the record may have landed before the renew, a repeat then succeeds).
    renew_lost: bool,
    /// `lease_stolen` was counted for this claim.
    theft_counted: bool,
    /// `Some` once the stream handed the claim off.
    delivery: Option<Delivery>,
}

/// The outbox of one worker: every claim it won and has not settled yet.
#[derive(Debug, Clone)]
pub struct Outbox {
    entries: BTreeMap<Uuid, Entry>,
    /// Bytes held by deliveries.
    bytes: usize,
    max_bytes: usize,
    /// The model checker's mutation (`docs/model.md#mutations`): a transient
    /// settle failure drops the delivery silently.
    #[cfg(feature = "mutation-hooks")]
    drop_on_transient: bool,
}

impl Outbox {
    /// An empty outbox holding at most `max_bytes` of deliveries.
    pub fn new(max_bytes: usize) -> Self {
        Outbox {
            entries: BTreeMap::new(),
            bytes: 0,
            max_bytes,
            #[cfg(feature = "mutation-hooks")]
            drop_on_transient: false,
        }
    }

    /// Breaks this outbox on purpose for the model checker's mutation test
    /// (`docs/model.md#mutations`): from now on a settle call that fails for a
    /// transient reason is dropped without a trace instead of being resent.
    #[cfg(feature = "mutation-hooks")]
    pub fn mutate_drop_on_transient_error(&mut self) {
        self.drop_on_transient = true;
    }

    /// Changes the byte bound (a reconfiguration); deliveries already held stay.
    pub fn set_max_bytes(&mut self, max_bytes: usize) {
        self.max_bytes = max_bytes;
    }

    /// Deliveries in flight (claims handed off and not yet settled).
    pub fn depth(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.delivery.is_some())
            .count()
    }

    /// Whether no claim is registered at all: nothing to renew or deliver.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Claims whose lease is being renewed (owned by a stream or handed off).
    pub fn renewing(&self) -> usize {
        self.entries.values().filter(|e| !e.renew_lost).count()
    }

    /// What the outbox holds for `claim_id` (for tests that look into it).
    #[cfg(test)]
    pub(crate) fn held(&self, claim_id: Uuid) -> Option<Held> {
        let entry = self.entries.get(&claim_id)?;
        Some(Held {
            renewing: !entry.renew_lost,
            delivery: entry.delivery.as_ref().map(|d| HeldDelivery {
                call: d.call.clone(),
                next_attempt_ms: d.next_attempt_ms,
                give_up_at_ms: d.give_up_at_ms,
            }),
        })
    }

    /// Every claim registered, owned by a stream or delivering (for tests).
    #[cfg(test)]
    pub(crate) fn claims(&self) -> usize {
        self.entries.len()
    }

    /// A stream won `lease`: renew it every interval, the first one interval
    /// after the claim was sent (at once when that has passed).
    pub fn start(&mut self, lease: Lease, now_ms: u64) {
        let interval_ms = millis(lease.interval).max(1);
        let first_renew_in_ms = interval_ms.saturating_sub(millis(lease.age));
        self.entries.insert(
            lease.claim_id,
            Entry {
                scope: lease.scope,
                previous_scope: lease.previous_scope,
                lease: lease.lease,
                interval_ms,
                next_renew_ms: now_ms.saturating_add(first_renew_in_ms),
                renews_in_flight: 0,
                renew_failures: 0,
                renew_lost: false,
                theft_counted: false,
                delivery: None,
            },
        );
    }

    /// The stream settled its claim itself: stop renewing (idempotent). A
    /// claim already handed off is the outbox's and stays.
    pub fn stop(&mut self, claim_id: Uuid) {
        if self
            .entries
            .get(&claim_id)
            .is_some_and(|e| e.delivery.is_none())
        {
            self.entries.remove(&claim_id);
        }
    }

    /// The stream's settle call found the lease stolen: the counters to
    /// increment (`lease_stolen`, unless a renew already counted this theft).
    pub fn lease_lost(&mut self, claim_id: Uuid) -> Vec<OutboxAction> {
        match self.entries.get_mut(&claim_id) {
            Some(entry) if entry.theft_counted => Vec::new(),
            Some(entry) => {
                entry.theft_counted = true;
                vec![count(EventKind::LeaseStolen)]
            }
            None => vec![count(EventKind::LeaseStolen)],
        }
    }

    /// The stream hands its claim off: from now on the outbox delivers
    /// `handoff.call` (or its downgrade) and keeps renewing the lease.
    pub fn hand_off(&mut self, handoff: Handoff, now_ms: u64) -> Vec<OutboxAction> {
        let mut out = vec![outbox_count(OutboxEvent::TakenOver)];
        let Handoff {
            claim_id,
            fence,
            mut call,
            last_error,
            budget,
        } = handoff;
        let mut first_delay_ms = 0;
        match last_error.map(|e| next_step(&call, e)) {
            None => {}
            Some(Step::Retry) => first_delay_ms = backoff_ms(claim_id, 1),
            Some(Step::Downgrade(lesser)) => {
                out.push(outbox_count(OutboxEvent::Downgraded));
                call = lesser;
            }
            Some(Step::Lost) => {
                // The stream reports a lost lease itself; nothing to deliver.
                self.entries.remove(&claim_id);
                return Vec::new();
            }
            Some(Step::GiveUp) => {
                out.extend(self.give_up(claim_id, &call, fence, "the store refused it"));
                return out;
            }
        }
        let mut bytes = delivery_bytes(&call);
        if self.bytes.saturating_add(bytes) > self.max_bytes {
            match downgraded(&call) {
                Some(lesser) if self.bytes + delivery_bytes(&lesser) <= self.max_bytes => {
                    out.push(outbox_count(OutboxEvent::Downgraded));
                    out.push(log(
                        LogLevel::Warn,
                        format!(
                            "scope {}: the outbox is full; recording the response as not replayable",
                            call.scope().to_hex()
                        ),
                    ));
                    bytes = delivery_bytes(&lesser);
                    call = lesser;
                }
                _ => {
                    out.push(outbox_count(OutboxEvent::Full));
                    out.extend(self.give_up(claim_id, &call, fence, "the outbox is full"));
                    return out;
                }
            }
        }
        let scope = call.scope();
        let entry = self.entries.entry(claim_id).or_insert_with(|| Entry {
            // A hand-off without a registered lease (the release of a claim
            // answered too late to keep): deliver it; there is no lease to renew.
            scope,
            previous_scope: None,
            lease: Duration::ZERO,
            interval_ms: u64::MAX,
            next_renew_ms: u64::MAX,
            renews_in_flight: 0,
            renew_failures: 0,
            renew_lost: true,
            theft_counted: false,
            delivery: None,
        });
        if let Some(previous) = entry.delivery.take() {
            self.bytes -= previous.bytes;
            out.push(adjust(Gauge::OutboxDepth, -1));
            out.push(adjust(Gauge::OutboxBytes, -signed(previous.bytes)));
        }
        entry.delivery = Some(Delivery {
            call,
            fence,
            attempts: 0,
            next_attempt_ms: now_ms.saturating_add(first_delay_ms),
            give_up_at_ms: now_ms.saturating_add(millis(budget)),
            in_flight: false,
            bytes,
        });
        self.bytes += bytes;
        out.push(adjust(Gauge::OutboxDepth, 1));
        out.push(adjust(Gauge::OutboxBytes, signed(bytes)));
        out
    }

    /// The root context's tick: the calls due now, and deliveries whose
    /// budget ran out.
    pub fn on_tick(&mut self, now_ms: u64) -> Vec<OutboxAction> {
        let mut out = Vec::new();
        let expired: Vec<Uuid> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.delivery
                    .as_ref()
                    .is_some_and(|d| !d.in_flight && d.give_up_at_ms <= now_ms)
            })
            .map(|(id, _)| *id)
            .collect();
        for claim_id in expired {
            if let Some((call, fence)) = self.delivery_call(claim_id) {
                out.extend(self.give_up(claim_id, &call, fence, "its retry budget ran out"));
            }
        }
        for (&claim_id, entry) in &mut self.entries {
            if !entry.renew_lost
                && entry.renews_in_flight < MAX_RENEWS_IN_FLIGHT
                && entry.next_renew_ms <= now_ms
            {
                entry.renews_in_flight += 1;
                entry.next_renew_ms = now_ms.saturating_add(entry.interval_ms);
                out.push(OutboxAction::Dispatch {
                    id: CallId {
                        claim_id,
                        kind: CallKind::Renew,
                    },
                    call: StoreCall::Renew {
                        scope: entry.scope,
                        request: RenewRequest {
                            claim_id,
                            lease_ms: millis(entry.lease),
                            previous_scope: entry.previous_scope,
                        },
                    },
                });
            }
            if let Some(delivery) = &mut entry.delivery
                && !delivery.in_flight
                && delivery.next_attempt_ms <= now_ms
            {
                delivery.in_flight = true;
                delivery.attempts += 1;
                out.push(outbox_count(OutboxEvent::Retried));
                out.push(OutboxAction::Dispatch {
                    id: CallId {
                        claim_id,
                        kind: CallKind::Settle,
                    },
                    call: delivery.call.clone(),
                });
            }
        }
        out
    }

    fn delivery_call(&self, claim_id: Uuid) -> Option<(StoreCall, i64)> {
        self.entries
            .get(&claim_id)?
            .delivery
            .as_ref()
            .map(|d| (d.call.clone(), d.fence))
    }

    /// The evidence lines of a retiring root context: one per delivery still
    /// held, so a record that dies with its VM can be named afterwards
    /// (`docs/envoy-facts.md#a-retired-root-context-keeps-working`).
    pub fn on_retire(&self) -> Vec<OutboxAction> {
        self.entries
            .values()
            .filter_map(|entry| entry.delivery.as_ref())
            .map(|delivery| {
                let note = "plugin retired with this call in its outbox; it is delivered only \
                            while the Wasm VM lives";
                let line = evidence(
                    Settle::Retired,
                    &delivery.call,
                    delivery.fence,
                    By::Outbox,
                    note,
                );
                log(LogLevel::Info, line)
            })
            .collect()
    }

    /// Stops renewing and delivering `claim_id` (of fence `fence`) for good.
    fn give_up(
        &mut self,
        claim_id: Uuid,
        call: &StoreCall,
        fence: i64,
        why: &str,
    ) -> Vec<OutboxAction> {
        let mut out = self.remove(claim_id);
        out.push(outbox_count(OutboxEvent::GivenUp));
        let note = format!(
            "giving up on {} because {why}; its lease will expire and one same-body retry \
             may run again",
            call.name()
        );
        out.push(log(
            LogLevel::Warn,
            evidence(Settle::GivenUp, call, fence, By::Outbox, &note),
        ));
        out
    }

    fn remove(&mut self, claim_id: Uuid) -> Vec<OutboxAction> {
        match self.entries.remove(&claim_id).and_then(|e| e.delivery) {
            Some(delivery) => {
                self.bytes -= delivery.bytes;
                vec![
                    adjust(Gauge::OutboxDepth, -1),
                    adjust(Gauge::OutboxBytes, -signed(delivery.bytes)),
                ]
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
