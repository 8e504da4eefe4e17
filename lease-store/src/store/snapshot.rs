//! A record as the read that explains a lost claim saw it (`READ_SQL`, `claim.rs`), and the
//! answer it gives any claimant of the scope (F3): a lost claim and a long-poll follower's
//! re-check answer with the same function (`keyflight_store_core::answer`), so they cannot
//! disagree.

use std::time::{Duration, Instant};

use keyflight_protocol::Digest;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::{ClaimResponse, StoredResponse};
use keyflight_store_core::answer::{Answer, Record, RecordState, answer_for};
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::{ClaimAttempt, StoreError};

/// A record as `READ_SQL` saw it: everything needed to answer any claimant
/// of the scope, whatever its fingerprint. Owned, so one read can be shared.
#[derive(Debug, Clone)]
pub struct RecordSnapshot {
    state: RecordState,
    fingerprint: Vec<u8>,
    /// The fence of the record's last claim: the run an `unknown` record is about.
    fence: i64,
    /// `None` when not replayable; otherwise the stored response, if any.
    replay: Option<Option<StoredResponse>>,
    /// When the lease (pending) or cooldown (failed) runs out, by this process's clock.
    remaining_until: Option<Instant>,
    /// Past its retention: `CLAIM_SQL`'s `ttl` branch may reuse it.
    retention_over: bool,
    /// When its retention runs out, by this process's clock.
    expires_until: Option<Instant>,
}

impl RecordSnapshot {
    pub(super) fn from_row(row: &Row) -> Result<RecordSnapshot, StoreError> {
        let state = RecordState::parse(row.try_get::<_, &str>("state")?);
        let replay = if state == RecordState::Completed && row.try_get("replayable")? {
            Some(stored_response(row)?)
        } else {
            None
        };
        let remaining_ms: Option<i64> = row.try_get("remaining_ms")?;
        let remaining_ms = u64::try_from(remaining_ms.unwrap_or(0)).unwrap_or(0);
        Ok(RecordSnapshot {
            state,
            fingerprint: row.try_get::<_, &[u8]>("fingerprint")?.to_vec(),
            fence: row.try_get("fence")?,
            replay,
            remaining_until: (remaining_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(remaining_ms)),
            retention_over: row
                .try_get::<_, Option<bool>>("retention_over")?
                .unwrap_or(false),
            expires_until: row
                .try_get::<_, Option<i64>>("expires_in_ms")?
                .and_then(|ms| u64::try_from(ms).ok())
                .map(|ms| Instant::now() + Duration::from_millis(ms)),
        })
    }

    /// What a claimant with `fingerprint` that did not win is told (F3), or
    /// `None` when the record may be winnable and the claim should run
    /// ([`keyflight_store_core::answer::answer_for`]).
    pub fn answer_for(&self, fingerprint: &Digest) -> Result<Option<ClaimAttempt>, StoreError> {
        let left = self.remaining_until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        });
        let record = Record {
            state: self.state,
            same_fingerprint: self.fingerprint == fingerprint.0.as_slice(),
            // Any time left counts, however little: at least a millisecond.
            remaining_ms: if left.is_zero() {
                0
            } else {
                millis(left).max(1)
            },
            retention_over: self.retention_over,
        };
        Ok(match answer_for(&record) {
            None => None,
            Some(Answer::Conflict) => Some(answer(ClaimResponse::Conflict)),
            Some(Answer::Completed) => Some(ClaimAttempt {
                record_expires_at: self.expires_until,
                ..answer(self.completed_response()?)
            }),
            Some(Answer::InProgress { retry_after_s }) => Some(ClaimAttempt {
                response: ClaimResponse::InProgress { retry_after_s },
                pending_until: self.remaining_until,
                record_expires_at: None,
                statement_sent: None,
            }),
            Some(Answer::Cooldown { retry_after_s }) => {
                Some(answer(ClaimResponse::Cooldown { retry_after_s }))
            }
            Some(Answer::Unknown) => Some(answer(ClaimResponse::Unknown {
                fence: Some(self.fence),
            })),
        })
    }

    /// Whether the record is `pending` (its lease live or not).
    pub(super) fn is_pending(&self) -> bool {
        self.state == RecordState::Pending
    }

    /// A completed record: its response, or `not_replayable`.
    fn completed_response(&self) -> Result<ClaimResponse, StoreError> {
        match &self.replay {
            None => Ok(ClaimResponse::NotReplayable),
            Some(Some(response)) => Ok(ClaimResponse::Completed {
                response: response.clone(),
            }),
            Some(None) => Err(StoreError::Unavailable(
                "a replayable record has no response".into(),
            )),
        }
    }
}

/// The recorded response in a row (`response_status`, `response_headers`,
/// `response_body`), or `None` when there is none.
pub(super) fn stored_response(row: &Row) -> Result<Option<StoredResponse>, StoreError> {
    let status: Option<i32> = row.try_get("response_status")?;
    let body: Option<&[u8]> = row.try_get("response_body")?;
    let (Some(status), Some(body)) = (status, body) else {
        return Ok(None);
    };
    let headers: Option<Json<Vec<(String, String)>>> = row.try_get("response_headers")?;
    let status = u16::try_from(status)
        .map_err(|_| StoreError::Unavailable(format!("stored status {status} out of range")))?;
    Ok(Some(StoredResponse::new(
        status,
        headers.map(|Json(h)| h).unwrap_or_default(),
        body,
    )))
}

fn answer(response: ClaimResponse) -> ClaimAttempt {
    ClaimAttempt {
        response,
        pending_until: None,
        record_expires_at: None,
        statement_sent: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(state: RecordState, remaining_ms: u64, retention_over: bool) -> RecordSnapshot {
        RecordSnapshot {
            state,
            fingerprint: vec![7; 32],
            fence: 3,
            replay: (state == RecordState::Completed)
                .then(|| Some(StoredResponse::new(201, Vec::new(), b"ok"))),
            remaining_until: (remaining_ms > 0)
                .then(|| Instant::now() + Duration::from_millis(remaining_ms)),
            retention_over,
            expires_until: (!retention_over).then(|| Instant::now() + Duration::from_secs(60)),
        }
    }

    fn response(record: &RecordSnapshot, fingerprint: u8) -> Option<ClaimResponse> {
        match record.answer_for(&Digest([fingerprint; 32])) {
            Ok(attempt) => attempt.map(|attempt| attempt.response),
            Err(e) => panic!("a well-formed snapshot failed to answer: {e}"),
        }
    }

    #[test]
    fn a_settled_record_answers_without_a_claim() {
        let completed = snapshot(RecordState::Completed, 0, false);
        assert!(matches!(
            response(&completed, 7),
            Some(ClaimResponse::Completed { .. })
        ));
        assert_eq!(response(&completed, 8), Some(ClaimResponse::Conflict));
        assert_eq!(
            response(&snapshot(RecordState::Failed, 1500, false), 7),
            Some(ClaimResponse::Cooldown { retry_after_s: 2 })
        );
        assert_eq!(
            response(&snapshot(RecordState::Unknown, 0, true), 7),
            Some(ClaimResponse::Unknown { fence: Some(3) })
        );
    }

    #[test]
    fn a_live_lease_is_in_progress_even_past_retention() {
        let pending = snapshot(RecordState::Pending, 30_000, true);
        let Ok(Some(attempt)) = pending.answer_for(&Digest([7; 32])) else {
            panic!("a live lease must answer in_progress");
        };
        assert_eq!(
            attempt.response,
            ClaimResponse::InProgress { retry_after_s: 30 }
        );
        assert!(attempt.pending_until.is_some());
        assert_eq!(response(&pending, 8), Some(ClaimResponse::Conflict));
    }

    #[test]
    fn a_winnable_record_asks_for_the_claim() {
        assert_eq!(response(&snapshot(RecordState::Pending, 0, false), 7), None);
        assert_eq!(response(&snapshot(RecordState::Failed, 0, false), 7), None);
        assert_eq!(
            response(&snapshot(RecordState::Completed, 0, true), 7),
            None
        );
        assert_eq!(
            response(&snapshot(RecordState::Completed, 0, true), 8),
            None
        );
        assert_eq!(response(&snapshot(RecordState::Other, 0, false), 7), None);
    }
}
