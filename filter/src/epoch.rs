//! F9: what a worker knows about the lease-store's operator epoch.
//!
//! The store counts operator erases and resolves in one number, its operator
//! epoch (`GET /v1/epoch`). Each worker's root context asks for it every
//! [`EdgeCache::epoch_interval`] from its tick and keeps the latest answer
//! with the time the question was *sent*. A stream reads the cache only under
//! [`EpochWatch::current`]: the epoch from an answer sent within
//! `max_staleness`, else none (and then the cache is not used at all).
//!
//! Why that bounds staleness: an erase commits at time `t` and bumps the epoch
//! in the same transaction, so any answer to a question sent after `t` reports
//! the new epoch. An entry carries the epoch its stream read the cache under,
//! which was known before the entry's record was read from the store, so it is
//! at most the epoch of that record's read. At any time later than
//! `t + max_staleness`, the answer in use was asked after `t`: it reports an
//! epoch above every entry written before the erase, and those entries are
//! misses. An erased or re-resolved record is thus never served from an edge
//! more than `max_staleness` after the operator's change. A worker that cannot
//! reach the store stops serving from the cache after the same bound.
//!
//! Pure: times are passed in, in milliseconds since the Unix epoch.

use keyflight_protocol::time::millis;

use crate::config::EdgeCache;
use crate::store_call::CallError;

/// At most one warning about failed epoch questions per worker per minute:
/// a store outage must not flood the log; the counter stays exact.
const WARN_INTERVAL_MS: u64 = 60_000;

/// One worker's view of the operator epoch.
#[derive(Debug, Clone)]
pub struct EpochWatch {
    interval_ms: u64,
    max_staleness_ms: u64,
    /// The latest epoch heard and when its question was sent.
    heard: Option<(u64, u64)>,
    /// When the question in flight was sent.
    asked_at_ms: Option<u64>,
    /// When the next question is due.
    due_at_ms: u64,
    /// When the last failure warning was logged.
    warned_at_ms: Option<u64>,
    /// Failures since the last warning.
    failures_unwarned: u64,
}

impl EpochWatch {
    /// A watch for `cache`'s bounds; the first question is due at once.
    pub fn new(cache: &EdgeCache) -> Self {
        EpochWatch {
            interval_ms: millis(cache.epoch_interval()).max(1),
            max_staleness_ms: millis(cache.max_staleness),
            heard: None,
            asked_at_ms: None,
            due_at_ms: 0,
            warned_at_ms: None,
            failures_unwarned: 0,
        }
    }

    /// Whether to send a question now; if so it counts as sent at `now_ms`.
    /// A question unanswered for `max_staleness` no longer blocks the next.
    pub fn due(&mut self, now_ms: u64) -> bool {
        let waiting = self
            .asked_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < self.max_staleness_ms);
        if waiting || now_ms < self.due_at_ms {
            return false;
        }
        self.asked_at_ms = Some(now_ms);
        self.due_at_ms = now_ms.saturating_add(self.interval_ms);
        true
    }

    /// The question sent last was answered.
    pub fn answered(&mut self, result: Result<u64, CallError>) {
        let Some(asked_at) = self.asked_at_ms.take() else {
            return;
        };
        if let Ok(epoch) = result
            && self.heard.is_none_or(|(_, at)| at <= asked_at)
        {
            self.heard = Some((epoch, asked_at));
        }
    }

    /// The question could not be sent: forget it, so the next tick retries.
    pub fn not_sent(&mut self) {
        if let Some(at) = self.asked_at_ms.take() {
            self.due_at_ms = at;
        }
    }

    /// A question failed at `now_ms`: the number of failures to report in a
    /// warning now, or `None` while the last warning is recent.
    pub fn failed(&mut self, now_ms: u64) -> Option<u64> {
        self.failures_unwarned = self.failures_unwarned.saturating_add(1);
        let recent = self
            .warned_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < WARN_INTERVAL_MS);
        if recent {
            return None;
        }
        self.warned_at_ms = Some(now_ms);
        Some(std::mem::take(&mut self.failures_unwarned))
    }

    /// The epoch a stream may use the cache under at `now_ms`.
    pub fn current(&self, now_ms: u64) -> Option<u64> {
        self.heard
            .filter(|(_, asked_at)| now_ms.saturating_sub(*asked_at) < self.max_staleness_ms)
            .map(|(epoch, _)| epoch)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn watch() -> EpochWatch {
        EpochWatch::new(&EdgeCache {
            slots: 1,
            max_entry_bytes: 1024,
            ttl: Duration::from_secs(60),
            max_staleness: Duration::from_millis(3000),
        })
    }

    #[test]
    fn asks_every_interval_and_one_question_at_a_time() {
        let mut w = watch();
        assert!(w.due(10_000));
        assert!(!w.due(10_500), "one question in flight");
        w.answered(Ok(4));
        assert!(
            !w.due(10_900),
            "the interval is a third of the staleness bound"
        );
        assert!(w.due(11_000));
        // A question that is never answered stops blocking after the bound.
        assert!(!w.due(13_999));
        assert!(w.due(14_000));
    }

    #[test]
    fn nothing_is_known_before_the_first_answer_or_after_the_bound() {
        let mut w = watch();
        assert_eq!(w.current(10_000), None);
        assert!(w.due(10_000));
        assert_eq!(w.current(10_100), None);
        w.answered(Ok(4));
        assert_eq!(w.current(10_100), Some(4));
        assert_eq!(w.current(12_999), Some(4));
        // Measured from when the question was sent, not answered.
        assert_eq!(w.current(13_000), None);
    }

    #[test]
    fn failures_keep_the_last_answer_until_the_bound() {
        let mut w = watch();
        assert!(w.due(0));
        w.answered(Ok(1));
        assert!(w.due(1_000));
        w.answered(Err(CallError::NoAnswer));
        assert_eq!(w.current(2_999), Some(1));
        assert_eq!(w.current(3_000), None);
        assert!(w.due(2_000));
        w.not_sent();
        assert!(
            w.due(2_100),
            "an unsent question is retried at the next tick"
        );
    }

    #[test]
    fn failures_are_warned_about_once_a_minute_with_their_count() {
        let mut w = watch();
        assert_eq!(w.failed(0), Some(1));
        assert_eq!(w.failed(1_000), None);
        assert_eq!(w.failed(59_999), None);
        assert_eq!(w.failed(60_000), Some(3));
        assert_eq!(w.failed(60_001), None);
    }

    #[test]
    fn a_new_epoch_replaces_the_old_one() {
        let mut w = watch();
        assert!(w.due(0));
        w.answered(Ok(1));
        assert!(w.due(1_000));
        w.answered(Ok(2));
        assert_eq!(w.current(1_500), Some(2));
        assert_eq!(w.current(3_999), Some(2));
    }
}
