//! The memory bounds a worker and the VM keep: the record outbox's byte bound (F14) and
//! the edge replay cache's slots, entry size, time to live and staleness bound (F9), with
//! their defaults. Kept apart because they size shared state, not a policy's behaviour.

use std::time::Duration;

use super::MIB;

/// Default bytes of handed-off records one worker's outbox holds.
pub const DEFAULT_OUTBOX_MAX_BYTES: u64 = 16 * MIB;
/// Default time the outbox keeps resending a record (per policy).
pub const DEFAULT_RECORD_RETRY_BUDGET_MS: u64 = 120_000;

/// F14: the per-worker record outbox's bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbox {
    /// Bytes of handed-off records one worker holds; a record that does not
    /// fit is recorded as not replayable instead.
    pub max_bytes: usize,
}

/// Default total bytes of the edge replay cache.
pub const DEFAULT_EDGE_CACHE_MAX_BYTES: u64 = 16 * MIB;
/// Default largest cached entry (encoded).
pub const DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES: u64 = 16 * 1024;
/// Default time an entry is served (never longer than a policy's retention).
pub const DEFAULT_EDGE_CACHE_TTL_S: u64 = 60;
/// Default bound on how long an edge may serve a record after an operator
/// erased or resolved it (F9).
pub const DEFAULT_EDGE_CACHE_MAX_STALENESS_MS: u64 = 3000;

/// F9: the edge replay cache's bounds, shared by every worker of the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeCache {
    /// Number of slots: `max_bytes / max_entry_bytes`, at most 65536.
    pub slots: u32,
    /// Largest encoded entry; a larger record is simply not cached.
    pub max_entry_bytes: usize,
    /// How long an entry is served; a policy's retention caps it further.
    pub ttl: Duration,
    /// How long after an operator's erase or resolve an entry may still be
    /// served: the worker asks the lease-store for its operator epoch every
    /// third of it, and serves nothing from the cache once its last answer is
    /// older than this.
    pub max_staleness: Duration,
}

impl EdgeCache {
    /// How often a worker asks the lease-store for its operator epoch.
    pub fn epoch_interval(&self) -> Duration {
        self.max_staleness / 3
    }
}
