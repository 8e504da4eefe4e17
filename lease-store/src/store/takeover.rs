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
//! The grace is per replica and knows only what this replica saw, so the replica makes
//! sure it sees: a probe asks the database every [`super::probe::PROBE_INTERVAL`] whether
//! or not any request does (`probe.rs`), and an answer that comes after more than
//! [`MAX_SILENCE`] without one — this replica was frozen, starved, or its calls hung —
//! starts a grace like an answer after a failure: what happened meanwhile is unknown. A
//! winner cut off from every replica while they and Postgres stay healthy is not covered:
//! its lease simply expires (`docs/guarantee.md#where-it-is-at-least-once` lists that case).

use std::time::{Duration, Instant};

/// The longest this replica may go without a database answer and still trust that it
/// saw every outage: four probe intervals.
pub const MAX_SILENCE: Duration = Duration::from_secs(2);

/// Whether pending leases may be taken over now; fed with the outcome of every
/// database call. Time is passed in, so the rules are plain unit tests.
#[derive(Debug)]
pub struct TakeoverGrace {
    grace: Duration,
    /// The last database call failed: the database is unavailable to this replica.
    failing: bool,
    /// Takeovers resume at this instant.
    allowed_from: Instant,
    /// When a database call last completed.
    last_answer: Instant,
}

impl TakeoverGrace {
    /// A replica starting at `now`: no takeovers until `now + grace`.
    pub fn starting(grace: Duration, now: Instant) -> Self {
        TakeoverGrace {
            grace,
            failing: false,
            allowed_from: now + grace,
            last_answer: now,
        }
    }

    /// A database call could not complete (the database is unreachable or not answering).
    pub fn failed(&mut self) {
        self.failing = true;
    }

    /// A database call completed at `now`; the first one after failures, or after a
    /// silence longer than [`MAX_SILENCE`], starts a grace.
    pub fn answered(&mut self, now: Instant) {
        let unwatched = now.saturating_duration_since(self.last_answer) > MAX_SILENCE;
        if std::mem::take(&mut self.failing) || unwatched {
            self.allowed_from = self.allowed_from.max(now + self.grace);
        }
        self.last_answer = self.last_answer.max(now);
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

    /// Feeds `grace` a healthy answer every second from `from` up to `to`, as the probe does.
    fn answers(grace: &mut TakeoverGrace, from: Instant, to: Instant) {
        let mut at = from;
        while at <= to {
            grace.answered(at);
            at += Duration::from_secs(1);
        }
    }

    #[test]
    fn answers_after_a_failure_start_a_new_grace_and_only_the_first_one_counts() {
        let t0 = Instant::now();
        let mut grace = TakeoverGrace::starting(GRACE, t0);
        let later = t0 + Duration::from_secs(60);
        answers(&mut grace, t0, later);
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
        let back = later + Duration::from_secs(1);
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
    fn an_answer_after_a_silence_starts_a_grace_though_nothing_failed() {
        let t0 = Instant::now();
        let mut grace = TakeoverGrace::starting(GRACE, t0);
        let quiet_from = t0 + Duration::from_secs(10);
        answers(&mut grace, t0, quiet_from);
        let back = quiet_from + MAX_SILENCE + Duration::from_millis(1);
        assert_eq!(grace.held_until(back), None, "nothing seen yet");
        grace.answered(back);
        assert_eq!(grace.held_until(back), Some(back + GRACE));
        answers(&mut grace, back, back + GRACE);
        let on_time = back + GRACE + MAX_SILENCE;
        grace.answered(on_time);
        assert_eq!(
            grace.held_until(on_time),
            None,
            "a silence of exactly the bound"
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
