//! Reading an [`Answer`] as the answer to the call that is in flight: a claim, an
//! acknowledgement (renew, finalize, release) or the operator epoch. Every odd answer
//! (no headers, a 503, garbage JSON, a `lease_lost` problem) ends up as a [`CallError`]
//! here, one place, a native unit test each.

use keyflight_protocol::ProblemCode;
use keyflight_protocol::wire::{ClaimAnswer, ClaimResponse, EpochResponse, framed};
use serde::Deserialize;

use super::{Answer, CallError};

#[derive(Deserialize)]
struct ProblemCodeOnly {
    code: ProblemCode,
}

#[derive(Deserialize)]
struct OutcomeOnly {
    outcome: String,
}

/// The fields of a claim answer beside its outcome (see [`ClaimAnswer`]), each read
/// on its own: an unreadable one is absent, never a reason to refuse the outcome.
#[derive(Deserialize)]
struct RecordExpiry {
    #[serde(default)]
    record_expires_in_ms: Option<u64>,
}

/// See [`RecordExpiry`].
#[derive(Deserialize)]
struct ClaimedAfter {
    #[serde(default)]
    claimed_after_ms: Option<u64>,
}

/// Reads a claim answer. A record's remaining retention that is absent or
/// unreadable is `None`: the replay is then not cached, never cached longer.
pub fn parse_claim_answer(answer: &Answer) -> Result<ClaimAnswer, CallError> {
    match answer.http()? {
        (200, frame) if answer.is_framed() => parse_framed_claim_answer(frame),
        (200, body) => parse_json_claim_answer(body),
        (other, _) => Err(CallError::Status(other)),
    }
}

/// Reads a claim answer's JSON.
fn parse_json_claim_answer(body: &[u8]) -> Result<ClaimAnswer, CallError> {
    let response = serde_json::from_slice(body).map_err(|_| {
        match serde_json::from_slice::<OutcomeOnly>(body) {
            Ok(answer) if answer.outcome == "completed" => CallError::MalformedRecord,
            _ => CallError::Malformed,
        }
    })?;
    let record_expires_in_ms = serde_json::from_slice::<RecordExpiry>(body)
        .ok()
        .and_then(|e| e.record_expires_in_ms);
    let claimed_after_ms = serde_json::from_slice::<ClaimedAfter>(body)
        .ok()
        .and_then(|c| c.claimed_after_ms);
    Ok(ClaimAnswer {
        response,
        record_expires_in_ms,
        claimed_after_ms,
    })
}

/// Reads a framed claim answer: a `completed` one whose head's `body_b64` is empty, the
/// body after it. The store frames nothing else, so any other frame is a record that
/// cannot be read: refused, never forwarded.
fn parse_framed_claim_answer(frame: &[u8]) -> Result<ClaimAnswer, CallError> {
    let (head, body) = framed::split(frame).ok_or(CallError::MalformedRecord)?;
    let mut answer = parse_json_claim_answer(head).map_err(|_| CallError::MalformedRecord)?;
    match &mut answer.response {
        ClaimResponse::Completed { response } if response.body.is_empty() => {
            response.body = body.to_vec();
            Ok(answer)
        }
        _ => Err(CallError::MalformedRecord),
    }
}

/// Reads a renew, finalize or release answer: 200 is success, `409
/// lease_lost` is [`CallError::LeaseLost`].
pub fn parse_ack_answer(answer: &Answer) -> Result<(), CallError> {
    match answer.http()? {
        (200, _) => Ok(()),
        (409, body) => match serde_json::from_slice::<ProblemCodeOnly>(body) {
            Ok(p) if p.code == ProblemCode::LeaseLost => Err(CallError::LeaseLost),
            _ => Err(CallError::Status(409)),
        },
        (other, _) => Err(CallError::Status(other)),
    }
}

/// Reads an epoch answer.
pub fn parse_epoch_answer(answer: &Answer) -> Result<u64, CallError> {
    match answer.http()? {
        (200, body) => serde_json::from_slice::<EpochResponse>(body)
            .map(|answer| answer.epoch)
            .map_err(|_| CallError::Malformed),
        (other, _) => Err(CallError::Status(other)),
    }
}

/// Parses a `:status` header value.
pub fn parse_status(value: &[u8]) -> Option<u16> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}
