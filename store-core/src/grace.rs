//! When a replica may take over an expired *pending* lease.
//!
//! A claim steals a same-fingerprint `pending` record whose lease ran out: its winner
//! died, and the retry may run. But a lease also runs out while its winner is alive and
//! cannot reach the store — the lease-store restarting, Postgres down or failing over.
//! The winner's proxy keeps the record in its outbox and resends the finalize as soon as
//! the store answers again (within a couple of seconds: its backoff is capped), yet a
//! client retry that arrives first would take the lease over and run the operation a
//! second time.
//!
//! So for a short *takeover grace* after a replica starts, and after its database
//! answers again following a failure, it takes over no pending lease: such a claim is
//! `in_progress` until the grace ends (a long-poll waiter wakes then and re-checks). The
//! winner's outbox lands its record inside the grace; a winner that really died is taken
//! over a few seconds later than it would otherwise be. Cooldowns (`failed` records)
//! elapse as usual: their retry is the documented one.
//!
//! The grace is per replica and knows only what this replica saw, so the replica makes
//! sure it sees: a probe asks the database every half second whether or not any request
//! does (`lease-store/src/store/probe.rs`), and an answer that comes after more than
//! [`MAX_SILENCE_MS`] without one — this replica was frozen, starved, or its calls hung —
//! starts a grace like an answer after a failure: what happened meanwhile is unknown. A
//! winner cut off from every replica while they and Postgres stay healthy is not covered:
//! its lease simply expires (`docs/guarantee.md#where-it-is-at-least-once` lists that case).

/// The longest a replica may go without a database answer and still trust that it saw
/// every outage: four probe intervals.
pub const MAX_SILENCE_MS: u64 = 2000;

/// Whether pending leases may be taken over now; fed with the outcome of every
/// database call. Times are milliseconds of one clock, passed in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TakeoverGrace {
    grace_ms: u64,
    /// The last database call failed: the database is unavailable to this replica.
    failing: bool,
    /// Takeovers resume at this time.
    allowed_from: u64,
    /// When a database call last completed.
    last_answer: u64,
    /// The model checker's mutation (`docs/model.md#mutations`): the grace holds only
    /// while the database fails, whatever its end.
    #[cfg(feature = "mutation-hooks")]
    only_while_failing: bool,
}

impl TakeoverGrace {
    /// A replica starting at `now`: no takeovers until `now + grace_ms`.
    pub fn starting(grace_ms: u64, now: u64) -> Self {
        TakeoverGrace {
            grace_ms,
            failing: false,
            allowed_from: now.saturating_add(grace_ms),
            last_answer: now,
            #[cfg(feature = "mutation-hooks")]
            only_while_failing: false,
        }
    }

    /// A replica that has run past its start-up grace by `now`, its last answer at `now`
    /// (how the model's replicas start).
    pub fn running(grace_ms: u64, now: u64) -> Self {
        TakeoverGrace {
            allowed_from: now,
            ..TakeoverGrace::starting(grace_ms, now)
        }
    }

    /// Breaks this grace on purpose for the model checker's mutation test
    /// (`docs/model.md#mutations`): from now on it holds only while the database fails,
    /// as if its comparison with its end were gone.
    #[cfg(feature = "mutation-hooks")]
    pub fn mutate_hold_only_while_failing(&mut self) {
        self.only_while_failing = true;
    }

    /// A database call could not complete (the database is unreachable or not answering).
    pub fn failed(&mut self) {
        self.failing = true;
    }

    /// A database call completed at `now`; the first one after failures, or after a
    /// silence longer than [`MAX_SILENCE_MS`], starts a grace.
    pub fn answered(&mut self, now: u64) {
        let unwatched = now.saturating_sub(self.last_answer) > MAX_SILENCE_MS;
        if std::mem::take(&mut self.failing) || unwatched {
            self.allowed_from = self.allowed_from.max(now.saturating_add(self.grace_ms));
        }
        self.last_answer = self.last_answer.max(now);
    }

    /// When takeovers resume, or `None` if they are allowed at `now`.
    pub fn held_until(&self, now: u64) -> Option<u64> {
        let within = now < self.allowed_from;
        #[cfg(feature = "mutation-hooks")]
        let within = within && !self.only_while_failing;
        (self.failing || within).then_some(self.allowed_from.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: u64 = 5000;
    const SECOND: u64 = 1000;

    #[test]
    fn a_starting_replica_waits_one_grace() {
        let t0 = 7;
        let grace = TakeoverGrace::starting(GRACE, t0);
        assert_eq!(grace.held_until(t0), Some(t0 + GRACE));
        assert_eq!(grace.held_until(t0 + GRACE - 1), Some(t0 + GRACE));
        assert_eq!(grace.held_until(t0 + GRACE), None);
    }

    #[test]
    fn a_running_replica_takes_over_at_once_until_a_silence() {
        let mut grace = TakeoverGrace::running(GRACE, 10 * SECOND);
        assert_eq!(grace.held_until(10 * SECOND), None);
        let back = 10 * SECOND + MAX_SILENCE_MS + 1;
        grace.answered(back);
        assert_eq!(grace.held_until(back), Some(back + GRACE));
    }

    /// Feeds `grace` a healthy answer every second from `from` up to `to`, as the probe does.
    fn answers(grace: &mut TakeoverGrace, from: u64, to: u64) {
        let mut at = from;
        while at <= to {
            grace.answered(at);
            at += SECOND;
        }
    }

    #[test]
    fn answers_after_a_failure_start_a_new_grace_and_only_the_first_one_counts() {
        let t0 = 0;
        let mut grace = TakeoverGrace::starting(GRACE, t0);
        let later = t0 + 60 * SECOND;
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
        let back = later + SECOND;
        grace.answered(back);
        assert_eq!(grace.held_until(back), Some(back + GRACE));
        grace.answered(back + SECOND);
        assert_eq!(
            grace.held_until(back + GRACE),
            None,
            "not extended by later answers"
        );
    }

    #[test]
    fn an_answer_after_a_silence_starts_a_grace_though_nothing_failed() {
        let t0 = 0;
        let mut grace = TakeoverGrace::starting(GRACE, t0);
        let quiet_from = t0 + 10 * SECOND;
        answers(&mut grace, t0, quiet_from);
        let back = quiet_from + MAX_SILENCE_MS + 1;
        assert_eq!(grace.held_until(back), None, "nothing seen yet");
        grace.answered(back);
        assert_eq!(grace.held_until(back), Some(back + GRACE));
        answers(&mut grace, back, back + GRACE);
        let on_time = back + GRACE + MAX_SILENCE_MS;
        grace.answered(on_time);
        assert_eq!(
            grace.held_until(on_time),
            None,
            "a silence of exactly the bound"
        );
    }

    #[test]
    fn a_zero_grace_only_holds_while_failing() {
        let t0 = 0;
        let mut grace = TakeoverGrace::starting(0, t0);
        assert_eq!(grace.held_until(t0), None);
        grace.failed();
        assert!(grace.held_until(t0).is_some());
        grace.answered(t0);
        assert_eq!(grace.held_until(t0), None);
    }
}
