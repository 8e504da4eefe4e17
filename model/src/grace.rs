//! A lease-store replica: its takeover grace (a line-by-line mirror of
//! `lease-store/src/store/takeover.rs`'s `TakeoverGrace`, in model milliseconds),
//! its freeze, and the orphan releases it still owes (`store/orphan.rs`).

use crate::db::How;

/// `takeover.rs`'s `MAX_SILENCE`.
pub const MAX_SILENCE_MS: u64 = 2000;

/// `TakeoverGrace`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grace {
    grace_ms: u64,
    failing: bool,
    allowed_from: u64,
    last_answer: u64,
}

impl Grace {
    /// `TakeoverGrace::starting`.
    pub fn starting(grace_ms: u64, now: u64) -> Self {
        Grace {
            grace_ms,
            failing: false,
            allowed_from: now + grace_ms,
            last_answer: now,
        }
    }

    /// `TakeoverGrace::failed`.
    pub fn failed(&mut self) {
        self.failing = true;
    }

    /// `TakeoverGrace::answered`.
    pub fn answered(&mut self, now: u64) {
        let unwatched = now.saturating_sub(self.last_answer) > MAX_SILENCE_MS;
        if std::mem::take(&mut self.failing) || unwatched {
            self.allowed_from = self.allowed_from.max(now + self.grace_ms);
        }
        self.last_answer = self.last_answer.max(now);
    }

    /// `TakeoverGrace::held_until(now).is_some()`.
    pub fn held(&self, now: u64) -> bool {
        self.failing || now < self.allowed_from
    }
}

/// One lease-store replica.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Replica {
    /// Frozen (SIGSTOP): it serves nothing, probes nothing.
    pub frozen: bool,
    /// Its takeover grace.
    pub grace: Grace,
    /// Orphan claims it still has to release (`OrphanGuard`): claim id, and how it won
    /// (a takeover is given back, any other win deleted: `OrphanRelease`).
    pub orphans: Vec<(u16, How)>,
}

impl Replica {
    /// A replica that has run for longer than its grace by `now`.
    pub fn running(grace_ms: u64, now: u64) -> Self {
        let mut grace = Grace::starting(grace_ms, now);
        grace.allowed_from = now;
        Replica {
            frozen: false,
            grace,
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
}
