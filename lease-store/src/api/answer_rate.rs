//! The answer rate (`docs/configuration.md#limits`): while other callers are active, each
//! caller's answer bytes are paced to an equal share of `--max-answer-bytes-per-second`.
//!
//! The answer budget bounds the bytes a caller holds at once, not how fast it has them
//! built: a caller that replays large records as fast as it reads them spends the replica's
//! cores (reading from the database, encoding, writing) at the expense of every other
//! caller's latency. The rule is the shares' (`crate::shares`): a caller alone is not paced,
//! as a single-workload installation expects; while others have called within the last
//! [`crate::shares::ACTIVE_WINDOW`], each caller's answers draw on a bucket refilled at its
//! share of the rate and holding at most its share of the answer budget. A caller whose
//! bucket is empty is refused before its call runs, and a batch's replay that finds it empty
//! is shed in its place, as for the answer budget; a caller may so overdraw by one answer,
//! which its next calls wait off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::shares::{Activity, Charged, SWEEP_EVERY};

/// Each caller's bucket of answer bytes, and what refills them.
pub struct AnswerRate {
    /// Bytes a second shared by the active callers; `0` paces nobody.
    per_second: u64,
    /// The most a bucket holds: the caller's share of the answer budget.
    burst: f64,
    activity: Arc<Activity>,
    buckets: Mutex<Buckets>,
}

/// The callers being paced, and when the full buckets were last forgotten.
#[derive(Default)]
struct Buckets {
    by_caller: HashMap<Charged, Bucket>,
    swept: Option<Instant>,
}

/// A caller's bytes left, as of `at`; negative when its last answer overdrew it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    bytes: f64,
    at: Instant,
}

impl AnswerRate {
    /// `per_second` bytes shared by the callers `activity` knows, each bucket at most
    /// `burst` bytes.
    pub fn new(per_second: u64, burst: usize, activity: Arc<Activity>) -> Self {
        AnswerRate {
            per_second,
            burst: burst as f64,
            activity,
            buckets: Mutex::default(),
        }
    }

    /// Whether `caller` may have more answer bytes built now: it is alone, or its bucket
    /// is not empty.
    pub fn allows(&self, caller: &Charged, now: Instant) -> bool {
        let Some(share) = self.share() else {
            return true;
        };
        let mut buckets = self.lock();
        match buckets.by_caller.get_mut(caller) {
            None => true,
            Some(bucket) => {
                *bucket = bucket.refilled(now, share, self.burst);
                bucket.bytes > 0.0
            }
        }
    }

    /// Draws `bytes` of answers from `caller`'s bucket; while it is alone, every bucket is
    /// full and none is kept.
    pub fn charge(&self, caller: &Charged, bytes: usize, now: Instant) {
        let share = self.share();
        let mut buckets = self.lock();
        let Some(share) = share else {
            buckets.by_caller.clear();
            return;
        };
        let burst = self.burst;
        let bucket = buckets.by_caller.entry(caller.clone()).or_insert(Bucket {
            bytes: burst,
            at: now,
        });
        *bucket = bucket.refilled(now, share, burst);
        bucket.bytes -= bytes as f64;
        // A full bucket says nothing a missing one does not: forget the callers that
        // stopped, so the map holds only the callers being paced. Once a
        // [`SWEEP_EVERY`], as the activity registry does: not a walk of every caller on
        // each answer.
        if buckets
            .swept
            .is_none_or(|swept| now.saturating_duration_since(swept) >= SWEEP_EVERY)
        {
            buckets
                .by_caller
                .retain(|_, bucket| bucket.refilled(now, share, burst).bytes < burst);
            buckets.swept = Some(now);
        }
    }

    /// Each active caller's bytes a second, or `None` when nobody is paced (one caller
    /// active, or no rate set).
    fn share(&self) -> Option<f64> {
        let active = self.activity.active();
        (self.per_second > 0 && active > 1).then(|| self.per_second as f64 / active as f64)
    }

    fn lock(&self) -> MutexGuard<'_, Buckets> {
        // A poisoned lock still holds usable buckets.
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Bucket {
    /// The bucket at `now`, refilled at `per_second` since it was last looked at, up to
    /// `burst`.
    fn refilled(self, now: Instant, per_second: f64, burst: f64) -> Bucket {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        Bucket {
            bytes: (self.bytes + elapsed * per_second).min(burst),
            at: now.max(self.at),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use super::*;

    fn peer(last: u8) -> Charged {
        Charged::Peer(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let at = Instant::now();
        let bucket = Bucket { bytes: -50.0, at };
        let later = bucket.refilled(at + Duration::from_millis(500), 100.0, 80.0);
        assert_eq!(later.bytes, 0.0);
        let full = bucket.refilled(at + Duration::from_secs(5), 100.0, 80.0);
        assert_eq!(full.bytes, 80.0);
    }

    #[test]
    fn a_caller_alone_is_never_paced() {
        let activity = Activity::new();
        let now = Instant::now();
        activity.saw(&peer(1), now);
        let rate = AnswerRate::new(100, 100, Arc::clone(&activity));
        rate.charge(&peer(1), 10_000, now);
        assert!(rate.allows(&peer(1), now));
    }

    #[test]
    fn while_others_are_active_a_caller_waits_off_what_it_overdrew() {
        let activity = Activity::new();
        let now = Instant::now();
        activity.saw(&peer(1), now);
        activity.saw(&peer(2), now);
        // Two callers active: each refills at 50 bytes a second, holding at most 100.
        let rate = AnswerRate::new(100, 100, Arc::clone(&activity));
        assert!(rate.allows(&peer(1), now), "a full bucket");
        rate.charge(&peer(1), 150, now);
        assert!(!rate.allows(&peer(1), now), "overdrawn by 50");
        assert!(
            rate.allows(&peer(2), now),
            "the other caller's bucket is its own"
        );
        assert!(!rate.allows(&peer(1), now + Duration::from_millis(900)));
        assert!(rate.allows(&peer(1), now + Duration::from_millis(1100)));
    }

    #[test]
    fn no_rate_paces_nobody() {
        let activity = Activity::new();
        let now = Instant::now();
        activity.saw(&peer(1), now);
        activity.saw(&peer(2), now);
        let rate = AnswerRate::new(0, 100, activity);
        rate.charge(&peer(1), 10_000, now);
        assert!(rate.allows(&peer(1), now));
    }

    #[test]
    fn callers_that_stopped_are_forgotten() {
        let activity = Activity::new();
        let now = Instant::now();
        activity.saw(&peer(1), now);
        activity.saw(&peer(2), now);
        let rate = AnswerRate::new(100, 100, activity);
        rate.charge(&peer(1), 60, now);
        rate.charge(&peer(2), 10, now + Duration::from_secs(2));
        let buckets = rate.lock();
        assert!(
            !buckets.by_caller.contains_key(&peer(1)),
            "refilled: forgotten"
        );
        assert!(buckets.by_caller.contains_key(&peer(2)));
    }
}
