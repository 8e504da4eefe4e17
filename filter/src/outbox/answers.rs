//! What the answers to the outbox's calls do: a renew keeps (or loses) the
//! lease, a settle call lands, is retried, downgraded, lost or given up
//! (F4, F14; `docs/record-outbox.md#delivery`).

use uuid::Uuid;

use super::delivery::{Step, backoff_ms, delivery_bytes, next_step};
use super::{
    CallId, CallKind, Entry, Outbox, OutboxAction, adjust, count, log, outbox_count, signed,
};
use crate::log::{By, LogLevel, Settle, evidence};
use crate::metrics::{EventKind, Gauge, OutboxEvent};
use crate::store_call::CallError;

impl Outbox {
    /// The answer to a call the outbox dispatched.
    pub fn on_answer(
        &mut self,
        id: CallId,
        result: Result<(), CallError>,
        now_ms: u64,
    ) -> Vec<OutboxAction> {
        match id.kind {
            CallKind::Renew => match self.entries.get_mut(&id.claim_id) {
                Some(entry) => entry.renew_answered(id.claim_id, result, now_ms),
                None => Vec::new(),
            },
            CallKind::Settle => self.settle_answered(id.claim_id, result, now_ms),
        }
    }

    pub(super) fn settle_answered(
        &mut self,
        claim_id: Uuid,
        result: Result<(), CallError>,
        now_ms: u64,
    ) -> Vec<OutboxAction> {
        let Some(entry) = self.entries.get_mut(&claim_id) else {
            return Vec::new();
        };
        let Some(delivery) = entry.delivery.as_mut() else {
            return Vec::new();
        };
        delivery.in_flight = false;
        let Err(error) = result else {
            let landed = evidence(
                Settle::Landed,
                &delivery.call,
                delivery.fence,
                By::Outbox,
                "recorded",
            );
            let mut out = self.remove(claim_id);
            out.push(outbox_count(OutboxEvent::Delivered));
            out.push(log(LogLevel::Info, landed));
            return out;
        };
        match next_step(&delivery.call, error) {
            #[cfg(feature = "mutation-hooks")]
            Step::Retry if self.drop_on_transient => self.remove(claim_id),
            Step::Retry => {
                let attempt = delivery.attempts.saturating_add(1);
                delivery.next_attempt_ms = now_ms.saturating_add(backoff_ms(claim_id, attempt));
                Vec::new()
            }
            Step::Downgrade(lesser) => {
                let freed = delivery.bytes - delivery_bytes(&lesser);
                delivery.bytes -= freed;
                delivery.call = lesser;
                delivery.next_attempt_ms = now_ms;
                self.bytes -= freed;
                vec![
                    outbox_count(OutboxEvent::Downgraded),
                    adjust(Gauge::OutboxBytes, -signed(freed)),
                ]
            }
            Step::Lost => {
                let counted = entry.theft_counted;
                let lost = evidence(
                    Settle::LeaseLost,
                    &delivery.call,
                    delivery.fence,
                    By::Outbox,
                    "another claim owns the record; this one is not recorded",
                );
                let mut out = self.remove(claim_id);
                out.push(outbox_count(OutboxEvent::Lost));
                out.push(log(LogLevel::Warn, lost));
                if !counted {
                    out.push(count(EventKind::LeaseStolen));
                }
                out
            }
            Step::GiveUp => {
                let (call, fence) = (delivery.call.clone(), delivery.fence);
                let why = format!("the store refused it ({error})");
                self.give_up(claim_id, &call, fence, &why)
            }
        }
    }
}

impl Entry {
    /// A renew answered. A failed one is retried on the delivery backoff
    /// (capped at the renew interval) rather than a whole interval later: when
    /// the store or Postgres is back after an outage that outlasted part of
    /// the lease, the lease is refreshed within seconds, inside the store's
    /// takeover grace, instead of possibly after the lease ran out.
    fn renew_answered(
        &mut self,
        claim_id: Uuid,
        result: Result<(), CallError>,
        now_ms: u64,
    ) -> Vec<OutboxAction> {
        self.renews_in_flight = self.renews_in_flight.saturating_sub(1);
        if result.is_ok() {
            self.renew_failures = 0;
        } else if !self.renew_lost && result != Err(CallError::LeaseLost) {
            self.renew_failures = self.renew_failures.saturating_add(1);
            let retry = backoff_ms(claim_id, self.renew_failures).min(self.interval_ms);
            self.next_renew_ms = self.next_renew_ms.min(now_ms.saturating_add(retry));
        }
        match result {
            Ok(()) => Vec::new(),
            Err(_) if self.renew_lost => Vec::new(),
            Err(CallError::LeaseLost) => {
                self.renew_lost = true;
                if self.delivery.is_some() || self.theft_counted {
                    // The delivery's own answer tells a theft from a record
                    // that already landed.
                    Vec::new()
                } else {
                    self.theft_counted = true;
                    vec![count(EventKind::LeaseStolen)]
                }
            }
            Err(_) => vec![count(EventKind::RenewError)],
        }
    }
}
