//! The reconcile log: one entry per answer the service gave keyflight's reconcile question
//! (`docs/reconcile.md`), in order, logged once the ledger's transaction committed.
//!
//! A history checker (`keyflight-chaos`) excuses a re-run under `uncertain: reconcile` only
//! on the service's own word that the earlier fence is fenced out: an `absent` answer about
//! that fence (or a higher one), logged here before the re-run's handler started. What the
//! filter or the lease-store say about the question is the system under test's; this log
//! is the service's. Like the execution log it lives in memory, for demo and test runs.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use keyflight_protocol::time::millis;
use serde::Serialize;

/// What the service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A run committed; `fence` is that run's.
    Committed,
    /// No run at or below the asked fence committed, and none ever will.
    Absent,
}

/// One answer given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reconciliation {
    /// When the answer's transaction had committed, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The operation asked about.
    pub scope: String,
    /// The fence asked about.
    pub asked_fence: i64,
    /// The answer.
    pub outcome: Outcome,
    /// For `committed`, the fence of the run that committed.
    pub fence: Option<i64>,
}

impl Reconciliation {
    /// The entry for an answer given now.
    pub fn now(scope: &str, asked_fence: i64, outcome: Outcome, fence: Option<i64>) -> Self {
        Reconciliation {
            at_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, millis),
            scope: scope.to_owned(),
            asked_fence,
            outcome,
            fence,
        }
    }
}

/// The log, shared by the endpoint and the route that serves it.
#[derive(Debug, Default)]
pub struct ReconcileLog {
    entries: Mutex<Vec<Reconciliation>>,
}

impl ReconcileLog {
    /// Appends one answer.
    pub fn push(&self, entry: Reconciliation) {
        self.lock().push(entry);
    }

    /// Every answer, oldest first.
    pub fn entries(&self) -> Vec<Reconciliation> {
        self.lock().clone()
    }

    /// Empties the log.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Reconciliation>> {
        // Each push is one append: a poisoned lock holds no half-written entry.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
