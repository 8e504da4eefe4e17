//! [`Worker`]: what one worker's streams share — the configuration they were created
//! under, the record outbox (F4, F14), the operator epoch (F9), the queue of calls the root
//! context sends for them — and the borrow-conflict bookkeeping around that shared state.
//! Streams reach it through `Rc<Worker>`; the root context owns it and reads its parts.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use uuid::Uuid;

use crate::coalesce::{CallQueue, Queued, StreamId};
use crate::config::Config;
use crate::drive::host::{Host, LogLevel};
use crate::epoch::EpochWatch;
use crate::log::{LogLimit, Repeating};
use crate::metrics::{EventKind, Metric};
use crate::outbox::{CallId, Handoff, Lease, Outbox, OutboxAction};
use crate::store_call::StoreCall;

/// What a worker's streams share.
#[derive(Debug)]
pub struct Worker {
    /// The configuration streams created now run under.
    pub config: Rc<Config>,
    /// The worker's record outbox: the root context's, not the
    /// configuration's, so a reconfigured plugin keeps it.
    pub(super) outbox: Rc<RefCell<Outbox>>,
    /// The operator epoch the edge cache is checked against (F9); `None` when
    /// no request can use the cache.
    pub(super) epoch: Option<RefCell<EpochWatch>>,
    /// The calls streams queued for the root context to send, and the queue that wakes
    /// it; `None` when this worker's streams send their own (`coalesce_calls: false`,
    /// or the host refused the wake-up queue).
    pub(super) coalesce: Option<(Rc<RefCell<CallQueue>>, u32)>,
    /// The rate limit on warnings every stream repeats while their cause lasts.
    log_limit: Cell<LogLimit>,
    /// Borrow conflicts met where no host was at hand, reported at the next tick.
    conflicts: Cell<Conflicts>,
}

/// Borrow conflicts on the worker's shared state: each "cannot happen" (the host runs one
/// callback of a worker at a time), so each is a bug, logged at error and counted
/// (`borrow_conflict`), never skipped silently (`docs/stream-machine.md#the-driver`).
#[derive(Debug, Clone, Copy, Default)]
struct Conflicts {
    count: u64,
    last_site: &'static str,
}

/// Reports `count` borrow conflicts, the last at `site`.
pub(super) fn report_conflicts(host: &mut impl Host, count: u64, site: &str) {
    for _ in 0..count {
        host.count(Metric::Event(EventKind::BorrowConflict));
    }
    host.log(
        LogLevel::Error,
        &format!(
            "{count} borrow conflict(s) on the worker's shared state (the last in {site}):              the step was skipped; this is a bug in keyflight, please report it"
        ),
    );
}

impl Worker {
    /// A worker running `config`, with `outbox` (kept across configurations).
    pub fn new(config: Rc<Config>, outbox: Rc<RefCell<Outbox>>) -> Self {
        Worker {
            epoch: config
                .edge_cache_in_use()
                .map(|cache| RefCell::new(EpochWatch::new(&cache))),
            config,
            outbox,
            coalesce: None,
            log_limit: Cell::default(),
            conflicts: Cell::default(),
        }
    }

    /// Notes a borrow conflict at `site`, for the next tick to report.
    pub(super) fn conflict(&self, site: &'static str) {
        let mut conflicts = self.conflicts.get();
        conflicts.count += 1;
        conflicts.last_site = site;
        self.conflicts.set(conflicts);
    }

    /// Reports the borrow conflicts noted since the last report.
    pub(super) fn report_noted_conflicts(&self, host: &mut impl Host) {
        let conflicts = self.conflicts.take();
        if conflicts.count > 0 {
            report_conflicts(host, conflicts.count, conflicts.last_site);
        }
    }

    /// Whether a `kind` warning may be logged at `now_ms`, and how many were held back
    /// before it (`crate::log::LogLimit`).
    pub fn admit_warning(&self, kind: Repeating, now_ms: u64) -> Option<u64> {
        let mut limit = self.log_limit.get();
        let admitted = limit.admit(kind, now_ms);
        self.log_limit.set(limit);
        admitted
    }

    /// The same worker, its streams queueing their calls in `calls` and waking the
    /// root context through `wake_queue`.
    pub fn coalescing(self, calls: Rc<RefCell<CallQueue>>, wake_queue: u32) -> Self {
        Worker {
            coalesce: Some((calls, wake_queue)),
            ..self
        }
    }

    /// Queues a stream's call for the root context to send, waking it for the first
    /// call of an event-loop turn. Gives the call back when this worker's streams send
    /// their own.
    #[expect(
        clippy::result_large_err,
        reason = "the call goes back to its stream by value, once"
    )]
    pub fn queue_call(&self, queued: Queued, host: &mut impl Host) -> Result<(), Queued> {
        let Some((calls, wake_queue)) = &self.coalesce else {
            return Err(queued);
        };
        let Ok(mut calls) = calls.try_borrow_mut() else {
            report_conflicts(host, 1, "queue_call");
            return Err(queued);
        };
        calls.push(queued, || host.wake(*wake_queue))
    }

    /// Stream `stream` dispatched its reconcile question as callout `token`: from inside a
    /// root context's callback (an answer it handed over) the host answers the root
    /// context, which passes the answer on ([`CallQueue::asked`]).
    pub fn asked(&self, token: u32, stream: StreamId) {
        if let Some((calls, _)) = &self.coalesce {
            match calls.try_borrow_mut() {
                Ok(mut calls) => calls.asked(token, stream),
                Err(_) => self.conflict("asked"),
            }
        }
    }

    /// The question callout `token` was answered to its stream directly.
    pub fn question_answered(&self, token: u32) {
        if let Some((calls, _)) = &self.coalesce {
            match calls.try_borrow_mut() {
                Ok(mut calls) => {
                    calls.answered(token);
                }
                Err(_) => self.conflict("question_answered"),
            }
        }
    }

    /// The epoch streams may read the edge cache under at `now_ms` (`None`:
    /// do not use the cache).
    pub fn cache_epoch(&self, now_ms: u64) -> Option<u64> {
        match self.epoch.as_ref()?.try_borrow() {
            Ok(watch) => watch.current(now_ms),
            Err(_) => {
                self.conflict("cache_epoch");
                None
            }
        }
    }

    /// A stream won `lease`: the outbox renews it from now on.
    pub fn start_renewal(&self, lease: Lease, now_ms: u64) {
        match self.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.start(lease, now_ms),
            Err(_) => self.conflict("start_renewal"),
        }
    }

    /// A stream settled its claim itself: the outbox stops renewing it.
    pub fn stop_renewal(&self, claim_id: Uuid) {
        match self.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.stop(claim_id),
            Err(_) => self.conflict("stop_renewal"),
        }
    }

    /// A stream's settle call found its lease stolen.
    pub fn lease_lost(&self, claim_id: Uuid, host: &mut impl Host) {
        let actions = match self.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.lease_lost(claim_id),
            Err(_) => return report_conflicts(host, 1, "lease_lost"),
        };
        for action in actions {
            perform(action, host);
        }
    }

    /// A stream hands its claim to the outbox. The outbox's own calls go out
    /// from the root context's next tick: a call dispatched from the stream
    /// would be cancelled with it (`docs/envoy-facts.md#streams-end-callouts-go-with-them`).
    pub fn hand_off(&self, handoff: Handoff, host: &mut impl Host) {
        let actions = match self.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.hand_off(handoff, host.now_ms()),
            Err(_) => return report_conflicts(host, 1, "hand_off"),
        };
        for action in actions {
            perform(action, host);
        }
    }

    /// The worker's outbox (for tests that look into it or answer its calls).
    #[cfg(test)]
    pub(crate) fn outbox(&self) -> std::cell::RefMut<'_, Outbox> {
        self.outbox.borrow_mut()
    }

    /// The worker hears the operator epoch `epoch`, asked at `now_ms` (for tests).
    #[cfg(test)]
    pub(crate) fn hear_epoch(&self, epoch: u64, now_ms: u64) {
        if let Some(watch) = &self.epoch {
            let mut watch = watch.borrow_mut();
            if watch.due(now_ms) {
                watch.answered(Ok(epoch));
            }
        }
    }
}

/// Performs an outbox action that is not a call, and hands a call back.
pub(super) fn perform(action: OutboxAction, host: &mut impl Host) -> Option<(CallId, StoreCall)> {
    match action {
        OutboxAction::Dispatch { id, call } => return Some((id, call)),
        OutboxAction::Count(metric) => host.count(metric),
        OutboxAction::Adjust { gauge, delta } => host.adjust(gauge, delta),
        OutboxAction::Log { level, message } => host.log(level, &message),
    }
    None
}
