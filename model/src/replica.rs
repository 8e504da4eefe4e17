//! A lease-store replica: the store's own takeover grace (`keyflight_store_core::grace`,
//! on the model's clock), its freeze, and the orphan releases it still owes
//! (`store/orphan.rs`).

use keyflight_store_core::grace::TakeoverGrace;
use keyflight_store_core::orphan::OrphanRelease;

/// One lease-store replica.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Replica {
    /// Frozen (SIGSTOP): it serves nothing, probes nothing.
    pub frozen: bool,
    /// Its takeover grace.
    pub grace: TakeoverGrace,
    /// Orphan claims it still has to release (`OrphanGuard`): claim id, and what the
    /// release leaves (`OrphanRelease::after` how it won).
    pub orphans: Vec<(u16, OrphanRelease)>,
}

impl Replica {
    /// A replica that has run for longer than its grace by `now`.
    pub fn running(grace_ms: u64, now: u64) -> Self {
        Replica {
            frozen: false,
            grace: TakeoverGrace::running(grace_ms, now),
            orphans: Vec::new(),
        }
    }

    /// A database call's outcome feeds the grace (`Store::run`).
    pub fn database_call(&mut self, db_up: bool, now: u64) {
        if db_up {
            self.grace.answered(now);
        } else {
            self.grace.failed();
        }
    }

    /// The grace holds takeovers at `now`.
    pub fn held(&self, now: u64) -> bool {
        self.grace.held_until(now).is_some()
    }
}
