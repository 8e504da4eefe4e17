//! The takeover grace (`keyflight_store_core::grace`) on this process's clock: its
//! milliseconds count from the store's start.

use std::time::{Duration, Instant};

use keyflight_protocol::time::millis;
use keyflight_store_core::grace::TakeoverGrace;

/// A [`TakeoverGrace`] fed with [`Instant`]s.
#[derive(Debug)]
pub struct ReplicaGrace {
    /// Millisecond zero of the grace's clock.
    epoch: Instant,
    grace: TakeoverGrace,
}

impl ReplicaGrace {
    /// A replica starting now, with a grace of `grace`.
    pub fn starting(grace: Duration) -> Self {
        let epoch = Instant::now();
        ReplicaGrace {
            epoch,
            grace: TakeoverGrace::starting(millis(grace), 0),
        }
    }

    /// A database call could not complete.
    pub fn failed(&mut self) {
        self.grace.failed();
    }

    /// A database call completed at `now`.
    pub fn answered(&mut self, now: Instant) {
        self.grace.answered(self.at(now));
    }

    /// When takeovers resume, or `None` if they are allowed at `now`; never before `now`,
    /// which the grace sees truncated to its millisecond.
    pub fn held_until(&self, now: Instant) -> Option<Instant> {
        let until = self.grace.held_until(self.at(now))?;
        Some((self.epoch + Duration::from_millis(until)).max(now))
    }

    fn at(&self, now: Instant) -> u64 {
        millis(now.saturating_duration_since(self.epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grace counts whole milliseconds; a hold never ends before the instant asked
    /// about (a waiter woken then would find it still held).
    #[test]
    fn a_hold_while_failing_lasts_at_least_until_now() {
        let mut grace = ReplicaGrace::starting(Duration::ZERO);
        grace.failed();
        let now = grace.epoch + Duration::from_micros(1500);
        assert!(grace.held_until(now).is_some_and(|until| until >= now));
    }
}
