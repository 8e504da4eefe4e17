//! One worker thread's [`Root`] of a configuration, which the main thread ticks.
//!
//! Envoy 1.40 gives an HTTP filter no timer and no callout on a worker thread outside a
//! stream; its configuration's scheduler and callouts run on the main thread
//! (`docs/envoy-facts.md#dynamic-modules`). So each worker keeps its own `Root`, as each
//! worker's Wasm VM keeps its root context, and the main thread runs that `Root`'s tick and
//! the answers to its calls (`filter-native/README.md#the-outbox-and-renewals`). A `Root`
//! and the streams made from it share `Rc`s, so everything of one worker's slot, on either
//! thread, runs holding the slot's lock.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use keyflight_filter::drive::host::{CalloutAnswered, Driver};
use keyflight_filter::drive::stream::Stream;
use keyflight_filter::drive::worker::Root;

use crate::host::{CallAnswer, NativeHost, Plugin};

thread_local! {
    /// The slot whose lock this thread holds (its address), so that a hook Envoy runs
    /// inside another one does not wait for its own lock.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// A worker's `Root`, the answers that came in while it was busy, and whether it panicked.
#[derive(Debug)]
pub struct Slot {
    lock: Mutex<()>,
    root: RefCell<Root>,
    early: RefCell<VecDeque<(CalloutAnswered, CallAnswer)>>,
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
        self.run(plugin, |root, mut host| done.set(root.on_done(&mut host)));
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
        self.run(plugin, |root, mut host| {
            #[cfg(feature = "test-panic")]
            crate::hooks::test_panic_on_tick(plugin);
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
            self.run(plugin, |root, host| {
                root.on_call_answer(answered, &mut host.answering(&answer));
            });
        });
    }

    /// Runs `work` on the `Root`, then the answers that came in meanwhile, behind the panic
    /// barrier: a panic leaves the worker failed closed.
    fn run(self: &Arc<Self>, plugin: &Plugin, work: impl FnOnce(&mut Root, NativeHost<'_>)) {
        self.hold(|| {
            if self.failed() {
                return;
            }
            let Ok(mut root) = self.root.try_borrow_mut() else {
                return;
            };
            let ran = catch_unwind(AssertUnwindSafe(|| {
                work(&mut root, NativeHost::root(plugin, self));
                loop {
                    let next = self.early.borrow_mut().pop_front();
                    let Some((answered, answer)) = next else {
                        break;
                    };
                    let mut host = NativeHost::root(plugin, self).answering(&answer);
                    root.on_call_answer(answered, &mut host);
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
