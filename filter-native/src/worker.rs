//! One worker thread's [`Root`] of a configuration, which the main thread ticks.
//!
//! Envoy 1.40 gives an HTTP filter no timer and no callout on a worker thread outside a
//! stream; its configuration's scheduler and callouts run on the main thread
//! (`docs/envoy-facts.md#dynamic-modules`). So each worker keeps its own `Root`, as each
//! worker's Wasm VM keeps its root context, and the main thread runs that `Root`'s tick and
//! the answers to its calls (`filter-native/README.md#the-outbox-and-renewals`). The calls
//! the worker's streams queue go out in a turn of the worker, a live stream's scheduled
//! event, as that stream's callouts (`turn.rs`, `filter-native/README.md#coalesced-calls`).
//! A `Root` and the streams made from it share `Rc`s, so everything of one worker's slot, on
//! either thread, runs holding the slot's lock.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use keyflight_filter::coalesce::{Delivery, StreamId};
use keyflight_filter::drive::host::{CalloutAnswered, Driver};
use keyflight_filter::drive::stream::Stream;
use keyflight_filter::drive::worker::Root;

use crate::abi::EnvoyFilter;
use crate::host::{CallAnswer, NativeHost, RootCalls};
use crate::plugin::Plugin;
use crate::turn::{Handoff, Request, Turn};

thread_local! {
    /// The slot whose lock this thread holds (its address), so that a hook Envoy runs
    /// inside another one does not wait for its own lock.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// A worker's `Root`, the answers that came in while it was busy, its turn bookkeeping,
/// and whether it panicked.
#[derive(Debug)]
pub struct Slot {
    lock: Mutex<()>,
    root: RefCell<Root>,
    early: RefCell<VecDeque<(CalloutAnswered, CallAnswer)>>,
    turn: RefCell<Turn>,
    failed: AtomicBool,
    settled: AtomicBool,
}

// SAFETY: the `Rc`s and `RefCell`s inside a slot, and inside the streams made from its
// `Root`, are only touched by a thread that holds the slot's lock ([`Slot::hold`]):
// `barrier.rs` and `hooks.rs` hold it around every hook of a stream, its creation and its
// destruction, and this module around every call of the `Root`.
unsafe impl Send for Slot {}
// SAFETY: as above.
unsafe impl Sync for Slot {}

/// Restores the thread's held slot when a hold ends, also by a panic.
struct Release(usize);

impl Drop for Release {
    fn drop(&mut self) {
        HELD.with(|held| held.set(self.0));
    }
}

impl Slot {
    /// The slot of a configured `root`.
    pub fn new(root: Root) -> Self {
        Slot {
            lock: Mutex::new(()),
            root: RefCell::new(root),
            early: RefCell::default(),
            turn: RefCell::default(),
            failed: AtomicBool::new(false),
            settled: AtomicBool::new(false),
        }
    }

    /// Runs `work` holding the slot's lock (at once when this thread holds it already).
    pub fn hold<R>(&self, work: impl FnOnce() -> R) -> R {
        let me = std::ptr::from_ref(self) as usize;
        if HELD.with(Cell::get) == me {
            return work();
        }
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let _release = Release(HELD.with(|held| held.replace(me)));
        work()
    }

    /// Whether the `Root` panicked: the worker's streams then fail closed, as every stream
    /// of a Wasm VM that died does.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Whether the `Root` is retired and its outbox settled (or it panicked): nothing needs
    /// to tick it.
    pub fn settled(&self) -> bool {
        self.settled.load(Ordering::Relaxed) || self.failed()
    }

    /// The retired `Root` told the host it is finished.
    pub fn settle(&self) {
        self.settled.store(true, Ordering::Relaxed);
    }

    /// Retires the `Root` (its configuration is destroyed): whether it is finished now,
    /// or keeps ticking until its outbox is settled.
    pub fn retire(self: &Arc<Self>, plugin: &Plugin) -> bool {
        let done = Cell::new(true);
        self.run(plugin, RootCalls::Config, |root, mut host| {
            done.set(root.on_done(&mut host));
        });
        if done.get() {
            self.settle();
        }
        self.settled()
    }

    /// The driver of a new stream on this worker.
    pub fn stream(&self, id: u32) -> Option<Stream> {
        self.hold(|| {
            let root = self.root.try_borrow().ok()?;
            Some(Stream::for_root(&root, id))
        })
    }

    /// The tick: renewals, the outbox's deliveries, the operator epoch.
    pub fn tick(self: &Arc<Self>, plugin: &Plugin) {
        self.run(plugin, RootCalls::Config, |root, mut host| {
            #[cfg(feature = "test-panic")]
            crate::test_panic::test_panic_on_tick(plugin);
            root.on_tick(&mut host);
        });
    }

    /// The answer to a call the `Root` sent; kept for later when the `Root` is busy (the
    /// call failed inside its dispatch).
    pub fn answer(
        self: &Arc<Self>,
        plugin: &Plugin,
        answered: CalloutAnswered,
        answer: CallAnswer,
    ) {
        self.hold(|| {
            if self.root.try_borrow_mut().is_err() {
                self.early.borrow_mut().push_back((answered, answer));
                return;
            }
            self.run(plugin, RootCalls::Config, |root, host| {
                root.on_call_answer(answered, &mut host.answering(&answer));
            });
        });
    }

    /// A stream of this worker ran its first hook: the `Root` may hand it answers, wake
    /// the worker through it and send calls as its callouts (`turn.rs`).
    pub fn joined(&self, stream: StreamId, envoy: EnvoyFilter, module: *const c_void) {
        self.hold(|| {
            if let Ok(mut turn) = self.turn.try_borrow_mut() {
                turn.join(stream, envoy, module);
            }
        });
    }

    /// A stream of this worker is destroyed. Envoy cancels the `Root`'s calls it carried,
    /// unanswered: each is sent again as another live stream's (`Turn::leave`). One that
    /// cannot be is lost, answered as failed in the next turn, which another live stream
    /// runs; with none left, at once, as nobody waits for it.
    pub fn left(self: &Arc<Self>, plugin: &Plugin, stream: StreamId) {
        self.hold(|| {
            let Ok(mut turn) = self.turn.try_borrow_mut() else {
                return;
            };
            let had_wake = turn.wake_pending();
            let left = turn.leave(stream, crate::host::now_ms());
            drop(turn);
            if let Some(scheduler) = left.scheduler {
                scheduler.delete();
            }
            for handoff in left.handoffs {
                self.send_again(handoff);
            }
            let Ok(turn) = self.turn.try_borrow() else {
                return;
            };
            let owed = turn.owes_a_turn() || (had_wake && !turn.wake_pending());
            drop(turn);
            if owed && !self.wake(None) {
                self.run(plugin, RootCalls::Refused, |root, mut host| {
                    self.answer_lost(root, &mut host);
                    drop(root.take_deliveries(&mut host));
                    unwoken(root, &mut host);
                });
                if let Ok(mut turn) = self.turn.try_borrow_mut() {
                    drop(turn.take_pending());
                }
            }
        });
    }

    /// Sends a call whose carrier ended again, as its new carrier's callout. Envoy's answer
    /// (or its refusal) is the call's, as the first one's would have been.
    fn send_again(&self, handoff: Handoff) {
        let request = &handoff.request;
        let headers: Vec<(&str, &str)> = request
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let sent = handoff.envoy.http_callout(
            &request.cluster,
            &headers,
            &request.body,
            handoff.timeout_ms,
        );
        if let Ok(mut turn) = self.turn.try_borrow_mut() {
            match sent {
                Ok(id) => turn.carried_again(handoff, id),
                Err(_) => turn.lose(handoff.token),
            }
        }
    }

    /// Wakes the worker: commits the scheduler of `prefer`, or of any live stream, unless
    /// a wake-up is on its way already. `false` when no stream could take it.
    pub fn wake(&self, prefer: Option<StreamId>) -> bool {
        self.hold(|| {
            let Ok(mut turn) = self.turn.try_borrow_mut() else {
                return false;
            };
            if turn.wake_pending() {
                return true;
            }
            let Some((id, live)) = turn.wake_target(prefer) else {
                return false;
            };
            if live.scheduler.is_none() {
                live.scheduler = live.envoy.scheduler();
            }
            let Some(scheduler) = &live.scheduler else {
                return false;
            };
            scheduler.commit(0);
            turn.woken(id);
            true
        })
    }

    /// The first of `streams` alive on this worker, with its Envoy filter.
    pub fn first_alive(&self, streams: &[StreamId]) -> Option<(StreamId, EnvoyFilter)> {
        self.hold(|| {
            let turn = self.turn.try_borrow().ok()?;
            streams
                .iter()
                .find_map(|&id| turn.live(id).map(|live| (id, live.envoy)))
        })
    }

    /// The `Root` sent `request` as `stream`'s callout `id`: its token.
    pub fn carry(&self, stream: StreamId, id: u64, request: Request) -> u32 {
        self.hold(|| {
            self.turn
                .try_borrow_mut()
                .map_or(0, |mut turn| turn.carry(stream, id, request))
        })
    }

    /// The `Root`'s token of `stream`'s callout `id`, when the `Root` sent it.
    pub fn carried(&self, stream: StreamId, id: u64) -> Option<u32> {
        self.hold(|| self.turn.try_borrow_mut().ok()?.answered(stream, id))
    }

    /// A turn of the worker, on it, through `carrier`: its scheduled event (`answer`
    /// `None`: the calls the streams queued go out) or the answer to a call it carried.
    /// Then the `Root` hands every stream the answer it is owed, as the Wasm root context
    /// does in its callback (`docs/stream-machine.md#coalesced-calls`).
    pub fn turn(
        self: &Arc<Self>,
        plugin: &Plugin,
        carrier: (StreamId, EnvoyFilter),
        answer: Option<(CalloutAnswered, CallAnswer)>,
    ) {
        self.hold(|| {
            if self.failed() {
                return self.fail_streams();
            }
            let calls = RootCalls::Carrier(carrier.0, carrier.1);
            if answer.is_none()
                && let Ok(mut turn) = self.turn.try_borrow_mut()
            {
                turn.waking();
            }
            self.run(plugin, calls, |root, mut host| {
                self.answer_lost(root, &mut host);
                match &answer {
                    Some((answered, answer)) => {
                        root.on_call_answer(*answered, &mut host.answering(answer));
                    }
                    None => root.on_wake(&mut host),
                }
            });
            self.deliver(plugin, calls);
        });
    }

    /// The `Root`'s calls whose carrier ended: each failed, as a call Envoy reset.
    fn answer_lost(&self, root: &mut Root, host: &mut NativeHost<'_>) {
        let lost = self
            .turn
            .try_borrow_mut()
            .map(|mut turn| turn.take_lost())
            .unwrap_or_default();
        for token in lost {
            let failed = CalloutAnswered {
                token,
                num_headers: 0,
                body_size: 0,
            };
            root.on_call_answer(failed, host);
        }
    }

    /// Hands each stream its answer; the calls they queue meanwhile go out after, and what
    /// those are answered at once is handed over in turn (`Root::take_deliveries`).
    fn deliver(self: &Arc<Self>, plugin: &Plugin, calls: RootCalls) {
        loop {
            let mut deliveries = self
                .turn
                .try_borrow_mut()
                .map(|mut turn| turn.take_pending())
                .unwrap_or_default();
            self.run(plugin, calls, |root, mut host| {
                deliveries.extend(root.take_deliveries(&mut host));
            });
            if deliveries.is_empty() {
                break;
            }
            self.hand_over(deliveries);
            self.run(plugin, calls, |root, mut host| root.on_wake(&mut host));
        }
        self.run(plugin, calls, |root, _| root.callback_returned());
    }

    /// The `Root` panicked: no answer comes for the calls its streams queued. Each live
    /// stream is answered through its panic barrier, which fails it closed, as every
    /// stream of a failed Wasm VM is (`filter-native/README.md#panics`).
    fn fail_streams(&self) {
        let streams = self
            .turn
            .try_borrow()
            .map(|turn| turn.streams())
            .unwrap_or_default();
        let failed = streams.into_iter().map(|stream| Delivery {
            stream,
            answer: keyflight_filter::store_call::Answer::NotSent,
        });
        self.hand_over(failed.collect());
    }

    /// Each answer to its stream, through the stream's panic barrier; a stream gone since
    /// takes nothing.
    fn hand_over(&self, deliveries: Vec<Delivery>) {
        for Delivery { stream, answer } in deliveries {
            let target = self
                .turn
                .try_borrow()
                .ok()
                .and_then(|turn| turn.live(stream).map(|live| (live.envoy, live.module)));
            if let Some((envoy, module)) = target {
                // SAFETY: a live stream's filters: `left` forgets a stream before its
                // filter is dropped, under this slot's lock, which is held here.
                unsafe { crate::barrier::deliver(envoy, module, answer) };
            }
        }
    }

    /// Runs `work` on the `Root`, then the answers that came in meanwhile, behind the panic
    /// barrier: a panic leaves the worker failed closed. On the main thread the answers it
    /// gave out wait for a turn of the worker, where the streams are.
    fn run(
        self: &Arc<Self>,
        plugin: &Plugin,
        calls: RootCalls,
        work: impl FnOnce(&mut Root, NativeHost<'_>),
    ) {
        self.hold(|| {
            if self.failed() {
                return;
            }
            let Ok(mut root) = self.root.try_borrow_mut() else {
                return;
            };
            let ran = catch_unwind(AssertUnwindSafe(|| {
                work(&mut root, NativeHost::root(plugin, self, calls));
                loop {
                    let next = self.early.borrow_mut().pop_front();
                    let Some((answered, answer)) = next else {
                        break;
                    };
                    let mut host = NativeHost::root(plugin, self, calls).answering(&answer);
                    root.on_call_answer(answered, &mut host);
                }
                if let RootCalls::Config = calls {
                    let mut host = NativeHost::root(plugin, self, calls);
                    let deliveries = root.take_deliveries(&mut host);
                    if self.hold_for_worker(deliveries) {
                        root.callback_returned();
                    } else {
                        unwoken(&mut root, &mut host);
                    }
                }
            }));
            if ran.is_err() {
                self.failed.store(true, Ordering::Relaxed);
                crate::barrier::abi_log_only(
                    "keyflight: panic in a worker's root driver: its record outbox stopped, and \
                     its streams are answered 503 journal_unavailable from now on",
                );
            }
        });
    }
}

impl Slot {
    /// Answers the `Root` gave out on the main thread wait for a turn of the worker; with
    /// no stream left to run one, nobody waits for them (`false`).
    fn hold_for_worker(&self, deliveries: Vec<Delivery>) -> bool {
        if deliveries.is_empty() {
            return true;
        }
        if let Ok(mut turn) = self.turn.try_borrow_mut() {
            turn.hold_for_worker(deliveries);
        }
        if self.wake(None) {
            return true;
        }
        if let Ok(mut turn) = self.turn.try_borrow_mut() {
            drop(turn.take_pending());
        }
        false
    }
}

/// The `Root` took answers out for streams no turn will hand them to: none is alive. Its
/// queue then counts on a wake-up that never comes, so it runs the wake-up itself (what
/// its dead streams queued fails, for nobody), and the next stream's call wakes the worker
/// again instead of waiting for the tick.
fn unwoken(root: &mut Root, host: &mut NativeHost<'_>) {
    root.on_wake(host);
    drop(root.take_deliveries(host));
    root.callback_returned();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_inside_a_hold_of_the_same_slot_runs_at_once() {
        let slot = Slot::new(Root::default());
        assert_eq!(slot.hold(|| slot.hold(|| 7)), 7);
    }

    #[test]
    fn another_thread_waits_for_the_hold_to_end() {
        let slot = Arc::new(Slot::new(Root::default()));
        let order = Arc::new(Mutex::new(Vec::new()));
        slot.hold(|| {
            let (slot, theirs) = (Arc::clone(&slot), Arc::clone(&order));
            let other = std::thread::spawn(move || {
                slot.hold(|| theirs.lock().map(|mut o| o.push("other")).ok());
            });
            order.lock().map(|mut o| o.push("first")).ok();
            other
        })
        .join()
        .expect("the other thread");
        assert_eq!(*order.lock().expect("order"), vec!["first", "other"]);
    }

    #[test]
    fn a_stream_is_made_from_the_root_of_its_slot() {
        let slot = Slot::new(Root::default());
        assert!(slot.stream(1).is_some());
        assert!(!slot.failed());
    }
}
