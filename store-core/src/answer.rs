//! What a claimant that did not win is told, from the record it lost to (F3).
//!
//! The lease-store reads the record after a lost claim (`READ_SQL`), and a long-poll
//! follower re-checks a shared snapshot of it; both answer with [`answer_for`], so they
//! cannot disagree. `None` means the record may be winnable (its lease or cooldown ran out,
//! or it is past retention) and the claim should run again.

/// The `state` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// A claim owns the record.
    Pending,
    /// The answer is recorded.
    Completed,
    /// A cooldown runs.
    Failed,
    /// Waits for an operator.
    Unknown,
    /// A value this build does not know: treated as "claim again".
    Other,
}

impl RecordState {
    /// The column's value.
    pub fn parse(state: &str) -> RecordState {
        match state {
            "pending" => RecordState::Pending,
            "completed" => RecordState::Completed,
            "failed" => RecordState::Failed,
            "unknown" => RecordState::Unknown,
            _ => RecordState::Other,
        }
    }
}

/// A record as a claimant sees it at the time of its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Its state.
    pub state: RecordState,
    /// It carries the claimant's fingerprint.
    pub same_fingerprint: bool,
    /// Milliseconds left of its lease (`pending`) or cooldown (`failed`); 0 when over.
    pub remaining_ms: u64,
    /// Past its retention: the claim statement's `ttl` branch may reuse it.
    pub retention_over: bool,
}

/// The answer to a claimant that did not win.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The recorded outcome (its response, or `not_replayable`).
    Completed,
    /// Another request's record.
    Conflict,
    /// A live lease: come back in this many seconds.
    InProgress {
        /// [`retry_after_s`] of the lease left.
        retry_after_s: u64,
    },
    /// A cooldown: come back in this many seconds.
    Cooldown {
        /// [`retry_after_s`] of the cooldown left.
        retry_after_s: u64,
    },
    /// The outcome is uncertain: an operator decides (`docs/records.md#operators`).
    Unknown,
}

/// What a claimant is told by `record`, or `None` when the claim should run again.
///
/// A different fingerprint is a conflict in every state, `unknown` included: the
/// caller's request is not the one whose outcome is uncertain.
pub fn answer_for(record: &Record) -> Option<Answer> {
    let live = record.remaining_ms > 0;
    let live_lease = record.state == RecordState::Pending && live;
    if record.retention_over && record.state != RecordState::Unknown && !live_lease {
        return None;
    }
    if !record.same_fingerprint {
        return Some(Answer::Conflict);
    }
    let retry_after_s = retry_after_s(record.remaining_ms);
    match record.state {
        RecordState::Completed => Some(Answer::Completed),
        RecordState::Pending if live => Some(Answer::InProgress { retry_after_s }),
        RecordState::Failed if live => Some(Answer::Cooldown { retry_after_s }),
        RecordState::Unknown => Some(Answer::Unknown),
        _ => None,
    }
}

/// Whole seconds to wait for `remaining_ms`, rounded up and at least 1 (a
/// `Retry-After` of 0 invites a hot loop).
pub fn retry_after_s(remaining_ms: u64) -> u64 {
    remaining_ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: RecordState, remaining_ms: u64) -> Record {
        Record {
            state,
            same_fingerprint: true,
            remaining_ms,
            retention_over: false,
        }
    }

    #[test]
    fn retry_after_rounds_up_to_at_least_one_second() {
        assert_eq!(retry_after_s(0), 1);
        assert_eq!(retry_after_s(1), 1);
        assert_eq!(retry_after_s(1000), 1);
        assert_eq!(retry_after_s(1001), 2);
    }

    #[test]
    fn a_live_lease_or_cooldown_answers_with_its_time_left_and_an_elapsed_one_claims_again() {
        use RecordState::{Failed, Pending};
        let in_progress = Answer::InProgress { retry_after_s: 2 };
        assert_eq!(answer_for(&record(Pending, 1500)), Some(in_progress));
        let cooldown = Answer::Cooldown { retry_after_s: 1 };
        assert_eq!(answer_for(&record(Failed, 1)), Some(cooldown));
        assert_eq!(answer_for(&record(Pending, 0)), None);
        assert_eq!(answer_for(&record(Failed, 0)), None);
        assert_eq!(answer_for(&record(RecordState::Other, 5)), None);
    }

    #[test]
    fn another_fingerprint_is_a_conflict_in_every_state_within_retention() {
        for state in [
            RecordState::Pending,
            RecordState::Completed,
            RecordState::Failed,
            RecordState::Unknown,
        ] {
            let other = Record {
                same_fingerprint: false,
                ..record(state, 0)
            };
            assert_eq!(answer_for(&other), Some(Answer::Conflict), "{state:?}");
        }
    }

    #[test]
    fn past_retention_only_a_live_lease_and_an_unknown_record_still_answer() {
        let over = |state, remaining_ms| Record {
            retention_over: true,
            ..record(state, remaining_ms)
        };
        assert_eq!(answer_for(&over(RecordState::Completed, 0)), None);
        assert_eq!(answer_for(&over(RecordState::Failed, 900)), None);
        assert_eq!(answer_for(&over(RecordState::Pending, 0)), None);
        assert_eq!(
            answer_for(&over(RecordState::Pending, 900)),
            Some(Answer::InProgress { retry_after_s: 1 })
        );
        assert_eq!(
            answer_for(&over(RecordState::Unknown, 0)),
            Some(Answer::Unknown)
        );
    }
}
