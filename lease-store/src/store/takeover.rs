//! When this replica may take over an expired *pending* lease.
//!
//! A claim steals a same-fingerprint `pending` record whose lease ran out: its winner
//! died, and the retry may run. But a lease also runs out while its winner is alive and
//! cannot reach the store — the lease-store restarting, Postgres down or failing over.
//! The winner's proxy keeps the record in its outbox and resends the finalize as soon as
//! the store answers again (within a couple of seconds: its backoff is capped), yet a
//! client retry that arrives first would take the lease over and run the operation a
//! second time.
//!
//! So for a short *takeover grace* after this replica starts, and after its database
//! answers again following a failure, it takes over no pending lease: such a claim is
//! `in_progress` until the grace ends (a long-poll waiter wakes then and re-checks). The
//! winner's outbox lands its record inside the grace; a winner that really died is taken
//! over a few seconds later than it would otherwise be. Cooldowns (`failed` records)
//! elapse as usual: their retry is the documented one.
//!
//! The grace is per replica and knows only what this replica saw. A winner cut off from
//! every replica while they and Postgres stay healthy is not covered: its lease simply
//! expires (the README's guarantee lists that case).

use std::time::{Duration, Instant};

/// Whether pending leases may be taken over now; fed with the outcome of every
/// database call. Time is passed in, so the rules are plain unit tests.
#[derive(Debug)]
pub struct TakeoverGrace {
    grace: Duration,
    /// The last database call failed: the database is unavailable to this replica.
    failing: bool,
    /// Takeovers resume at this instant.
    allowed_from: Instant,
}

impl TakeoverGrace {
    /// A replica starting at `now`: no takeovers until `now + grace`.
    pub fn starting(grace: Duration, now: Instant) -> Self {
        TakeoverGrace {
            grace,
            failing: false,
            allowed_from: now + grace,
        }
    }

    /// A database call could not complete (the database is unreachable or not answering).
    pub fn failed(&mut self) {
        self.failing = true;
    }

    /// A database call completed at `now`; the first one after failures starts a grace.
    pub fn answered(&mut self, now: Instant) {
        if std::mem::take(&mut self.failing) {
            self.allowed_from = self.allowed_from.max(now + self.grace);
        }
    }

    /// When takeovers resume, or `None` if they are allowed at `now`.
    pub fn held_until(&self, now: Instant) -> Option<Instant> {
        (self.failing || now < self.allowed_from).then_some(self.allowed_from.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(5);

    #[test]
    fn a_starting_replica_waits_one_grace() {
        let t0 = Instant::now();
        let grace = TakeoverGrace::starting(GRACE, t0);
        assert_eq!(grace.held_until(t0), Some(t0 + GRACE));
        assert_eq!(
            grace.held_until(t0 + GRACE - Duration::from_millis(1)),
            Some(t0 + GRACE)
        );
        assert_eq!(grace.held_until(t0 + GRACE), None);
    }

    #[test]
    fn answers_after_a_failure_start_a_new_grace_and_only_the_first_one_counts() {
        let t0 = Instant::now();
        let mut grace = TakeoverGrace::starting(GRACE, t0);
        let later = t0 + Duration::from_secs(60);
        grace.answered(later);
        assert_eq!(
            grace.held_until(later),
            None,
            "healthy answers change nothing"
        );
        grace.failed();
        assert!(
            grace.held_until(later).is_some(),
            "no takeovers while failing"
        );
        let back = later + Duration::from_secs(40);
        grace.answered(back);
        assert_eq!(grace.held_until(back), Some(back + GRACE));
        grace.answered(back + Duration::from_secs(1));
        assert_eq!(
            grace.held_until(back + GRACE),
            None,
            "not extended by later answers"
        );
    }

    #[test]
    fn a_zero_grace_only_holds_while_failing() {
        let t0 = Instant::now();
        let mut grace = TakeoverGrace::starting(Duration::ZERO, t0);
        assert_eq!(grace.held_until(t0), None);
        grace.failed();
        assert!(grace.held_until(t0).is_some());
        grace.answered(t0);
        assert_eq!(grace.held_until(t0), None);
    }
}
