//! The waiter registry: which long-polls wait on which scope.
//!
//! A map from scope to its waiters, so a settle notification wakes only its
//! own scope's waiters, however many thousands wait on others. Each
//! notification starts a new per-scope *generation* with one shared read
//! ([`SharedRead`]): the first waiter of the generation to run reads the
//! record for all of them. A [`Subscription`] removes itself on drop, and
//! [`Parked`] counts a waiter for the `waiting` gauge while it sleeps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keyflight_protocol::Digest;
use tokio::sync::{Notify, OnceCell};

use crate::store::RecordSnapshot;

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

/// The waiters registered on one scope, each with its subscription id, and
/// the shared read of the latest notification's generation.
#[derive(Default)]
struct ScopeWaiters {
    list: Vec<(u64, Arc<Notify>)>,
    latest: Arc<SharedRead>,
}

impl ScopeWaiters {
    /// Starts a new generation (its read not yet run) and wakes every waiter.
    fn wake(&mut self) {
        self.latest = Arc::default();
        for (_, notify) in &self.list {
            notify.notify_one();
        }
    }
}

/// The waiters registered on each scope.
type WaiterMap = HashMap<Digest, ScopeWaiters>;

/// Waiters per scope. A `std` mutex: held only for map edits, never across an await.
#[derive(Default)]
pub(super) struct Waiters {
    /// The LISTEN connection is up (set by the listener).
    pub(super) listening: AtomicBool,
    /// Long-polls parked right now.
    pub(super) parked: AtomicUsize,
    /// Shared and own reads run by re-checks.
    pub(super) reads: AtomicU64,
    /// Claims run by re-checks.
    pub(super) claims: AtomicU64,
    next_id: AtomicU64,
    by_scope: Mutex<WaiterMap>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, WaiterMap> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (each edit is one push or retain), so a poisoned lock is still usable.
        self.by_scope.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers interest in `scope` until the subscription is dropped.
    pub(super) fn subscribe(self: &Arc<Self>, scope: Digest) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        self.lock()
            .entry(scope)
            .or_default()
            .list
            .push((id, Arc::clone(&notify)));
        Subscription {
            waiters: Arc::clone(self),
            scope,
            id,
            notify,
        }
    }

    /// Wakes the waiters on one scope.
    pub(super) fn wake(&self, scope: &Digest) {
        if let Some(waiters) = self.lock().get_mut(scope) {
            waiters.wake();
        }
    }

    /// Wakes every waiter (after a reconnect, when notifications may have been missed).
    pub(super) fn wake_all(&self) {
        for waiters in self.lock().values_mut() {
            waiters.wake();
        }
    }
}

/// One waiter's registration; removes itself from the map on drop.
pub(super) struct Subscription {
    waiters: Arc<Waiters>,
    pub(super) scope: Digest,
    id: u64,
    notify: Arc<Notify>,
}

impl Subscription {
    /// Resolves once the scope was notified after this subscription was made
    /// (or after the previous `notified` returned).
    pub(super) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The shared read of the scope's latest notification. Called after a
    /// notification woke this waiter, so that read starts after it arrived.
    pub(super) fn shared_read(&self) -> Arc<SharedRead> {
        self.waiters
            .lock()
            .get(&self.scope)
            .map_or_else(Arc::default, |waiters| Arc::clone(&waiters.latest))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = self.waiters.lock();
        if let Some(waiters) = map.get_mut(&self.scope) {
            waiters.list.retain(|(id, _)| *id != self.id);
            if waiters.list.is_empty() {
                map.remove(&self.scope);
            }
        }
    }
}
