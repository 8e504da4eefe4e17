//! What releasing an orphan claim leaves, and how long a release looks for it
//! (`docs/records.md#orphan-claims`).

use keyflight_protocol::wire::WonHow;

/// What releasing an orphan leaves of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrphanRelease {
    /// `RELEASE_ORPHAN_SQL`: nothing. For a claim that inserted the record or reused one
    /// past its retention, which holds nothing of another request.
    Delete,
    /// `GIVE_BACK_SQL`: the record the claim took over (a lapsed lease, a cooldown that
    /// ran out), kept with its fingerprint. Deleted, another body could run under the key
    /// within the earlier request's retention. Also every guarded claim whose win was never
    /// read ([`OrphanRelease::UNREAD`]).
    GiveBack,
}

impl OrphanRelease {
    /// The release of a guarded claim whose statement was never read (the answer bound
    /// fired, or a dual claim's `COMMIT` went unanswered): how it won is not known, so it
    /// is given back. Were it a takeover, deleting would lose the earlier request's
    /// fingerprint; were it a fresh insert, giving back only keeps the key this request's
    /// for its retention — the same body takes it over at once, another gets `conflict`.
    /// A batch's claims are fresh inserts, so its unread ones are deleted.
    pub const UNREAD: OrphanRelease = OrphanRelease::GiveBack;

    /// The release of an orphan that won `how`.
    pub fn after(how: WonHow) -> OrphanRelease {
        match how {
            WonHow::RecoveredAbandoned => OrphanRelease::GiveBack,
            WonHow::Claimed | WonHow::RecoveredTtl => OrphanRelease::Delete,
        }
    }

    /// What it leaves, as evidence lines spell it.
    pub fn leaves(self) -> &'static str {
        match self {
            OrphanRelease::Delete => "no_record",
            OrphanRelease::GiveBack => "failed",
        }
    }
}

/// Until when a release that finds no row looks again: until its claim's statement is
/// surely over. That is the statement's answer bound after it was sent, unless the
/// database stopped answering meanwhile: a frozen database runs a statement it was sent
/// only once it resumes, so a release whose attempts went unanswered looks for one more
/// answer bound after the database first answers it again. Times in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseDeadline {
    settled_by: u64,
    answer_timeout_ms: u64,
    /// An attempt since the last answer got none.
    unanswered: bool,
}

impl ReleaseDeadline {
    /// A release whose claim's statement is surely over by `settled_by`, each statement
    /// bounded by `answer_timeout_ms`.
    pub fn new(settled_by: u64, answer_timeout_ms: u64) -> ReleaseDeadline {
        ReleaseDeadline {
            settled_by,
            answer_timeout_ms,
            unanswered: false,
        }
    }

    /// An attempt got no answer from the database.
    pub fn unanswered(&mut self) {
        self.unanswered = true;
    }

    /// The database answered at `now` that no pending row carries the claim: whether to
    /// look again.
    pub fn found_nothing(&mut self, now: u64) -> bool {
        if std::mem::take(&mut self.unanswered) {
            self.settled_by = self
                .settled_by
                .max(now.saturating_add(self.answer_timeout_ms));
        }
        now < self.settled_by
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: u64 = 5000;

    #[test]
    fn a_takeover_is_given_back_and_any_other_win_deleted() {
        assert_eq!(
            OrphanRelease::after(WonHow::RecoveredAbandoned),
            OrphanRelease::GiveBack
        );
        assert_eq!(
            OrphanRelease::after(WonHow::RecoveredTtl),
            OrphanRelease::Delete
        );
        assert_eq!(OrphanRelease::after(WonHow::Claimed), OrphanRelease::Delete);
    }

    #[test]
    fn a_release_that_finds_nothing_stops_at_the_statements_answer_bound() {
        let sent = 3;
        let mut deadline = ReleaseDeadline::new(sent + BOUND, BOUND);
        assert!(deadline.found_nothing(sent + 1000));
        assert!(!deadline.found_nothing(sent + BOUND));
    }

    #[test]
    fn after_an_unanswered_attempt_it_looks_for_one_more_bound_from_the_next_answer() {
        let sent = 3;
        let mut deadline = ReleaseDeadline::new(sent + BOUND, BOUND);
        // The database froze past the statement's bound, then answered at `back`.
        deadline.unanswered();
        let back = sent + BOUND * 3;
        assert!(deadline.found_nothing(back));
        assert!(deadline.found_nothing(back + BOUND - 1));
        assert!(!deadline.found_nothing(back + BOUND));
    }

    #[test]
    fn an_unanswered_attempt_never_shortens_the_wait() {
        let sent = 3;
        let mut deadline = ReleaseDeadline::new(sent + BOUND * 2, BOUND);
        deadline.unanswered();
        assert!(deadline.found_nothing(sent));
        assert!(deadline.found_nothing(sent + BOUND * 2 - 1));
        assert!(!deadline.found_nothing(sent + BOUND * 2));
    }
}
