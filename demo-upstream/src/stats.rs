//! Execution counters: how many payment handlers have started, in total and per path.
//!
//! "Executed" means the handler was entered, not that it answered: a request parked at a
//! gate has already executed, which is exactly what a duplicate-execution test must see.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// A snapshot of the counters, as `GET /stats` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// Payment handlers entered since start (or the last reset).
    pub executions: u64,
    /// The same count, per request path (query excluded).
    pub by_path: BTreeMap<String, u64>,
}

/// Thread-safe execution counters.
#[derive(Debug, Default)]
pub struct Stats {
    inner: Mutex<Snapshot>,
}

impl Stats {
    /// Counts one execution on `path` and returns the new total (1-based).
    pub fn record(&self, path: &str) -> u64 {
        let mut snapshot = self.lock();
        snapshot.executions += 1;
        *snapshot.by_path.entry(path.to_owned()).or_default() += 1;
        snapshot.executions
    }

    /// The current counters.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().clone()
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
        *self.lock() = Snapshot::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        // A panic while holding this lock cannot leave the counters half-updated in a way
        // that matters, so a poisoned lock is simply taken over.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
