//! F4: the per-worker registry of leases to renew.
//!
//! A stream's context cannot run a timer, so the root context owns this
//! registry and drives it from `on_tick`: streams register their lease on
//! `StartRenewal` and drop it on `StopRenewal` (or when they end), and each
//! tick asks [`Renewals::due`] which renew calls to dispatch. Time is passed in
//! (milliseconds from any fixed origin), so the schedule is a plain unit test.
//!
//! Checked on Envoy 1.40: ticks fire on every worker at the period set in
//! `on_configure` ([`crate::config::Config::tick_period`], a quarter of the
//! shortest renew interval), each worker's root context renews the leases of
//! its own streams, and renew calls dispatched from `on_tick` answer to the
//! root context. A stream that ends for any reason (answered, client gone,
//! upstream reset, Envoy shutting down) reaches `on_done`, which stops its
//! renewal; a dead proxy renews nothing, so its leases expire within one lease.
//!
//! The registry is also the ledger of stolen leases: a renew answered
//! `lease_lost` stops renewing and counts `lease_stolen` once; the stream's
//! later finalize or release that finds the same theft ([`Renewals::lease_lost`])
//! does not count it again.

use std::collections::BTreeMap;
use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::RenewRequest;
use uuid::Uuid;

use crate::metrics::{EventKind, Metric};
use crate::store_call::{CallError, StoreCall};

#[derive(Debug)]
struct Entry {
    scope: Digest,
    claim_id: Uuid,
    lease: Duration,
    interval_ms: u64,
    next_due_ms: u64,
    in_flight: bool,
    /// A renew found the lease stolen: never renewed again, already counted.
    lost: bool,
}

/// Leases being renewed, keyed by the owning stream's context id.
#[derive(Debug, Default)]
pub struct Renewals {
    entries: BTreeMap<u32, Entry>,
}

impl Renewals {
    /// Starts renewing `claim_id` for stream `context_id`, first at `now_ms + interval`.
    pub fn start(
        &mut self,
        context_id: u32,
        scope: Digest,
        claim_id: Uuid,
        lease: Duration,
        interval: Duration,
        now_ms: u64,
    ) {
        let interval_ms = u64::try_from(interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.entries.insert(
            context_id,
            Entry {
                scope,
                claim_id,
                lease,
                interval_ms,
                next_due_ms: now_ms.saturating_add(interval_ms),
                in_flight: false,
                lost: false,
            },
        );
    }

    /// Stops renewing for stream `context_id` (idempotent).
    pub fn stop(&mut self, context_id: u32) {
        self.entries.remove(&context_id);
    }

    /// Number of leases being renewed.
    pub fn len(&self) -> usize {
        self.entries.values().filter(|e| !e.lost).count()
    }

    /// Whether no lease is being renewed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stream `context_id`'s finalize or release found its lease stolen;
    /// returns the counters to increment (`lease_stolen`, unless a renew
    /// already counted this theft).
    pub fn lease_lost(&mut self, context_id: u32) -> Vec<Metric> {
        match self.entries.get_mut(&context_id) {
            Some(entry) if entry.lost => Vec::new(),
            Some(entry) => {
                entry.lost = true;
                vec![Metric::Event(EventKind::LeaseStolen)]
            }
            None => vec![Metric::Event(EventKind::LeaseStolen)],
        }
    }

    /// The renew calls due at `now_ms`, each with its stream's context id.
    /// A lease whose previous renew has not answered yet is skipped, so a slow
    /// store never sees a pile-up of renews for one claim.
    pub fn due(&mut self, now_ms: u64) -> Vec<(u32, StoreCall)> {
        self.entries
            .iter_mut()
            .filter(|(_, e)| !e.lost && !e.in_flight && e.next_due_ms <= now_ms)
            .map(|(&context_id, e)| {
                e.in_flight = true;
                e.next_due_ms = now_ms.saturating_add(e.interval_ms);
                let call = StoreCall::Renew {
                    scope: e.scope,
                    request: RenewRequest {
                        claim_id: e.claim_id,
                        lease_ms: u64::try_from(e.lease.as_millis()).unwrap_or(u64::MAX),
                    },
                };
                (context_id, call)
            })
            .collect()
    }

    /// Records a renew answer; returns the counters to increment. A lost
    /// lease stops renewal for good (the entry stays, marked, until the stream
    /// stops it, so the stream's own finding is not counted twice).
    pub fn answered(&mut self, context_id: u32, result: Result<(), CallError>) -> Vec<Metric> {
        let Some(entry) = self.entries.get_mut(&context_id) else {
            return Vec::new();
        };
        entry.in_flight = false;
        match result {
            Ok(()) => Vec::new(),
            Err(_) if entry.lost => Vec::new(),
            Err(CallError::LeaseLost) => {
                entry.lost = true;
                vec![Metric::Event(EventKind::LeaseStolen)]
            }
            Err(_) => vec![Metric::Event(EventKind::RenewError)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(r: &mut Renewals, ctx: u32, now: u64) {
        r.start(
            ctx,
            Digest([ctx as u8; 32]),
            Uuid::nil(),
            Duration::from_secs(30),
            Duration::from_secs(10),
            now,
        );
    }

    #[test]
    fn renews_every_interval_and_not_before() {
        let mut r = Renewals::default();
        start(&mut r, 7, 1000);
        assert!(r.due(10_999).is_empty());
        let due = r.due(11_000);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, 7);
        match &due[0].1 {
            StoreCall::Renew { request, .. } => assert_eq!(request.lease_ms, 30_000),
            other => panic!("unexpected call {other:?}"),
        }
        assert!(r.answered(7, Ok(())).is_empty());
        assert!(r.due(20_999).is_empty());
        assert_eq!(r.due(21_000).len(), 1);
    }

    #[test]
    fn no_second_renew_while_one_is_in_flight() {
        let mut r = Renewals::default();
        start(&mut r, 1, 0);
        assert_eq!(r.due(10_000).len(), 1);
        assert!(r.due(40_000).is_empty());
        assert_eq!(
            r.answered(1, Err(CallError::NoAnswer)),
            vec![Metric::Event(EventKind::RenewError)]
        );
        assert_eq!(r.due(40_000).len(), 1);
    }

    #[test]
    fn lost_lease_and_stop_end_renewal() {
        let mut r = Renewals::default();
        start(&mut r, 1, 0);
        start(&mut r, 2, 0);
        assert_eq!(r.due(10_000).len(), 2);
        assert_eq!(
            r.answered(1, Err(CallError::LeaseLost)),
            vec![Metric::Event(EventKind::LeaseStolen)]
        );
        r.stop(2);
        r.stop(2);
        assert!(r.is_empty());
        assert!(r.due(100_000).is_empty());
        assert!(r.answered(2, Ok(())).is_empty());
    }

    #[test]
    fn a_theft_is_counted_once_whoever_finds_it_first() {
        let mut r = Renewals::default();
        start(&mut r, 1, 0);
        start(&mut r, 2, 0);
        assert_eq!(r.due(10_000).len(), 2);
        // Stream 1: a renew finds it first; the finalize's finding is not recounted.
        assert_eq!(
            r.answered(1, Err(CallError::LeaseLost)),
            vec![Metric::Event(EventKind::LeaseStolen)]
        );
        assert!(r.lease_lost(1).is_empty());
        // Stream 2: the finalize finds it first (its renew is still in flight).
        assert_eq!(r.lease_lost(2), vec![Metric::Event(EventKind::LeaseStolen)]);
        assert!(r.answered(2, Err(CallError::LeaseLost)).is_empty());
        assert!(r.lease_lost(2).is_empty());
        r.stop(1);
        r.stop(2);
        // A stream that was never registered still counts its theft.
        assert_eq!(r.lease_lost(3), vec![Metric::Event(EventKind::LeaseStolen)]);
    }
}
