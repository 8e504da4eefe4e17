//! The waiter registry: which long-polls wait on which scope, within caps.
//!
//! A map from scope to one entry per scope, so a settle notification wakes only its own
//! scope's waiters, however many thousands wait on others. An entry is a `watch` channel
//! whose value is the scope's current *generation*: its shared read ([`SharedRead`]), run
//! by the first waiter of the generation for all of them. Waking a scope sends a new
//! generation (one send, however many wait), and a [`Subscription`] is a receiver plus a
//! count in the entry, so subscribing and unsubscribing are O(1) too. The map is split in
//! shards by the scope's first byte, each behind its own lock held only for those O(1)
//! edits, so waiters on different scopes do not contend on one process-wide lock.
//!
//! Caps (`docs/records.md#the-long-poll`): at most `per_scope` subscriptions on one scope
//! and `total` in the process; past either, [`Waiters::subscribe`] refuses at once and the
//! caller answers without parking. [`Parked`] counts a waiter for the `waiting` gauge while
//! it sleeps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keyflight_protocol::Digest;
use tokio::sync::{OnceCell, watch};

use crate::shares::Taken;
use crate::store::RecordSnapshot;

/// Shards of the scope map; a power of two no larger than the 256 values of a byte.
const SHARDS: usize = 64;

/// Default cap on long-polls parked on one scope.
pub const DEFAULT_MAX_WAITERS_PER_SCOPE: usize = 256;
/// Default cap on long-polls parked in one process.
pub const DEFAULT_MAX_WAITERS: usize = 10_000;

/// How many long-polls may wait, on one scope and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaiterCaps {
    /// Subscriptions on one scope.
    pub per_scope: usize,
    /// Subscriptions in the process.
    pub total: usize,
}

impl Default for WaiterCaps {
    fn default() -> Self {
        WaiterCaps {
            per_scope: DEFAULT_MAX_WAITERS_PER_SCOPE,
            total: DEFAULT_MAX_WAITERS,
        }
    }
}

/// Which cap refused a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The scope already has its most waiters.
    Scope,
    /// The process already has its most waiters.
    Total,
    /// The caller already has more than its share of them while other callers are owed
    /// theirs (`crate::shares`).
    Share,
}

/// Counts a parked long-poll for as long as it lives.
pub(super) struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    pub(super) fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Parked(counter)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One read of a scope's record, shared by the waiters woken by one notification.
pub(super) type SharedRead = OnceCell<Arc<Option<RecordSnapshot>>>;

/// One scope's generation channel and how many subscriptions hold a receiver of it.
struct ScopeEntry {
    generation: watch::Sender<Arc<SharedRead>>,
    subscribers: usize,
}

impl ScopeEntry {
    fn new() -> Self {
        ScopeEntry {
            generation: watch::Sender::new(Arc::default()),
            subscribers: 0,
        }
    }

    /// Starts a new generation (its read not yet run), which wakes every waiter.
    fn wake(&self) {
        self.generation.send_replace(Arc::default());
    }
}

type Shard = HashMap<Digest, ScopeEntry>;

/// Waiters per scope. `std` mutexes: held only for O(1) map edits, never across an await.
pub(super) struct Waiters {
    /// How many of the LISTEN connections are up (counted by the listeners).
    pub(super) listeners_up: AtomicUsize,
    /// Long-polls parked right now.
    pub(super) parked: AtomicUsize,
    /// Shared and own reads run by re-checks.
    pub(super) reads: AtomicU64,
    /// Claims run by re-checks.
    pub(super) claims: AtomicU64,
    caps: WaiterCaps,
    subscribed: AtomicUsize,
    shards: Box<[Mutex<Shard>]>,
}

impl Waiters {
    /// An empty registry with `caps`.
    pub(super) fn new(caps: WaiterCaps) -> Self {
        Waiters {
            listeners_up: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            reads: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            caps,
            subscribed: AtomicUsize::new(0),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, scope: &Digest) -> MutexGuard<'_, Shard> {
        let index = usize::from(scope.0[0]) % SHARDS;
        // Each edit is one insert, count change or removal: a panic cannot leave a shard
        // inconsistent, so a poisoned lock is still usable.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers interest in `scope` until the subscription is dropped, or refuses at once
    /// when a cap is reached.
    pub(super) fn subscribe(self: &Arc<Self>, scope: Digest) -> Result<Subscription, Full> {
        let total = self.caps.total;
        if self
            .subscribed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < total).then_some(n + 1)
            })
            .is_err()
        {
            return Err(Full::Total);
        }
        let mut shard = self.shard(&scope);
        let entry = shard.entry(scope).or_insert_with(ScopeEntry::new);
        if entry.subscribers >= self.caps.per_scope {
            drop(shard);
            self.subscribed.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::Scope);
        }
        entry.subscribers += 1;
        let generation = entry.generation.subscribe();
        drop(shard);
        Ok(Subscription {
            waiters: Arc::clone(self),
            scope,
            generation,
            share: None,
        })
    }

    /// Wakes the waiters on one scope.
    pub(super) fn wake(&self, scope: &Digest) {
        if let Some(entry) = self.shard(scope).get(scope) {
            entry.wake();
        }
    }

    /// Wakes every waiter (after a reconnect, when notifications may have been missed).
    pub(super) fn wake_all(&self) {
        for shard in self.shards.iter() {
            for entry in shard.lock().unwrap_or_else(|e| e.into_inner()).values() {
                entry.wake();
            }
        }
    }

    /// Subscriptions held right now.
    #[cfg(test)]
    fn subscribed(&self) -> usize {
        self.subscribed.load(Ordering::Acquire)
    }
}

/// One waiter's registration; removes itself from the map on drop.
pub struct Subscription {
    waiters: Arc<Waiters>,
    pub(super) scope: Digest,
    generation: watch::Receiver<Arc<SharedRead>>,
    /// The caller's place among the parked long-polls, when it was charged one.
    pub(super) share: Option<Taken>,
}

impl Subscription {
    /// Resolves once the scope was notified after this subscription was made
    /// (or after the previous `notified` returned).
    pub(super) async fn notified(&mut self) {
        // The sender lives in the scope's entry while this receiver does, so `changed`
        // cannot fail; should it, this waiter falls back to its own timers.
        if self.generation.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The shared read of the scope's latest notification. Called after a
    /// notification woke this waiter, so that read starts after it arrived.
    pub(super) fn shared_read(&self) -> Arc<SharedRead> {
        Arc::clone(&self.generation.borrow())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut shard = self.waiters.shard(&self.scope);
        if let Some(entry) = shard.get_mut(&self.scope) {
            entry.subscribers -= 1;
            if entry.subscribers == 0 {
                shard.remove(&self.scope);
            }
        }
        drop(shard);
        self.waiters.subscribed.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(n: u8) -> Digest {
        Digest::of(&[n])
    }

    #[test]
    fn caps_refuse_past_each_bound_and_dropping_frees_the_place() {
        let waiters = Arc::new(Waiters::new(WaiterCaps {
            per_scope: 2,
            total: 3,
        }));
        let a1 = waiters.subscribe(scope(1)).expect("room");
        let a2 = waiters.subscribe(scope(1)).expect("room");
        assert_eq!(waiters.subscribe(scope(1)).err(), Some(Full::Scope));
        let b = waiters.subscribe(scope(2)).expect("room");
        assert_eq!(waiters.subscribe(scope(3)).err(), Some(Full::Total));
        assert_eq!(waiters.subscribed(), 3);
        drop(a1);
        let a3 = waiters.subscribe(scope(1)).expect("a freed place");
        drop((a2, a3, b));
        assert_eq!(waiters.subscribed(), 0);
        assert!(waiters.shards.iter().all(|s| s.lock().unwrap().is_empty()));
    }

    #[tokio::test]
    async fn a_wake_reaches_every_subscriber_of_its_scope_only() {
        let waiters = Arc::new(Waiters::new(WaiterCaps::default()));
        let mut a = waiters.subscribe(scope(1)).expect("room");
        let mut b = waiters.subscribe(scope(1)).expect("room");
        let mut other = waiters.subscribe(scope(2)).expect("room");
        let before = a.shared_read();
        waiters.wake(&scope(1));
        a.notified().await;
        b.notified().await;
        assert!(!Arc::ptr_eq(&before, &a.shared_read()), "a new generation");
        assert!(
            Arc::ptr_eq(&a.shared_read(), &b.shared_read()),
            "one shared read"
        );
        let pending = tokio::time::timeout(std::time::Duration::ZERO, other.notified()).await;
        assert!(pending.is_err(), "another scope's waiter is not woken");
    }
}
