//! Rate-limited warnings (`docs/configuration.md#logs`): during an outage every call fails
//! the same way, and one line per call would flood the log (and its shipping) exactly when
//! it is read. A [`LogLimit`] lets at most one line per kind through each interval and
//! says, on the next line it lets through, how many it suppressed; the metrics count every
//! call regardless.
//!
//! The decision is pure ([`Window::admit`]); [`LogLimit`] keeps one window per kind behind
//! a mutex held only for that decision.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per kind per this long.
const INTERVAL: Duration = Duration::from_secs(1);

/// The kinds of warning that can repeat once per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A call failed because the database is unavailable.
    DatabaseUnavailable,
    /// The database refused a request value.
    DatabaseRefused,
    /// A readiness probe failed.
    NotReady,
    /// A workload not on the allowlist called the data plane.
    CallerRefused,
    /// A possible orphan claim was left to its lease (`store/orphan.rs`).
    OrphanLeftToLease,
    /// A group-commit batch failed as a whole and its calls ran singly (`store/batch/`).
    BatchFailed,
}

const KINDS: usize = 6;

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::DatabaseUnavailable => 0,
            Kind::DatabaseRefused => 1,
            Kind::NotReady => 2,
            Kind::CallerRefused => 3,
            Kind::OrphanLeftToLease => 4,
            Kind::BatchFailed => 5,
        }
    }
}

/// One kind's interval: when its last line went out, and what was held back since.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    last: Option<Instant>,
    suppressed: u64,
}

impl Window {
    /// `Some(suppressed)` when a line may go out at `now` (with how many were held back
    /// since the last one), `None` when it is suppressed.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < INTERVAL)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// The process's limiter, one window per [`Kind`].
#[derive(Debug, Default)]
pub struct LogLimit(Mutex<[Window; KINDS]>);

impl LogLimit {
    /// Whether a `kind` line may be logged now, and how many were suppressed before it.
    pub fn admit(&self, kind: Kind) -> Option<u64> {
        let mut windows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        windows[kind.index()].admit(Instant::now())
    }
}

/// The process-wide limiter.
pub fn global() -> &'static LogLimit {
    static LIMIT: std::sync::OnceLock<LogLimit> = std::sync::OnceLock::new();
    LIMIT.get_or_init(LogLimit::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_carries_the_suppressed_count() {
        let start = Instant::now();
        let mut window = Window::default();
        assert_eq!(window.admit(start), Some(0));
        for n in 1..=5 {
            assert_eq!(window.admit(start + Duration::from_millis(n * 100)), None);
        }
        assert_eq!(window.admit(start + INTERVAL), Some(5));
        assert_eq!(window.admit(start + INTERVAL), None);
        assert_eq!(window.admit(start + INTERVAL * 3), Some(1));
    }

    #[test]
    fn kinds_are_limited_apart() {
        let limit = LogLimit::default();
        assert_eq!(limit.admit(Kind::DatabaseUnavailable), Some(0));
        assert_eq!(limit.admit(Kind::DatabaseRefused), Some(0));
        assert_eq!(limit.admit(Kind::DatabaseUnavailable), None);
    }
}
