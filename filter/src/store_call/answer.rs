//! [`Answer`]: what the host reported for a callout, not yet parsed, and [`CallError`]:
//! why it gave no usable answer. Also splitting a batch's answer into each call's own, so
//! the code that reads answers never knows whether a call went alone or in a batch.

use keyflight_protocol::wire::batch::BorrowedBatchAnswer;

/// What came back for a callout, as the host reported it, not yet parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The host refused to dispatch the call.
    NotSent,
    /// The host delivered an answer.
    Received {
        /// `:status`; `None` when the call failed without response headers
        /// (connection failure, reset, timeout) or the status is unreadable.
        status: Option<u16>,
        /// The response body.
        body: Vec<u8>,
        /// Its `Content-Type` names a frame ([`framed`](keyflight_protocol::wire::framed)): a `completed` claim answer with
        /// the recorded body as raw bytes after its JSON.
        framed: bool,
    },
}

impl Answer {
    /// A 200 answer with `body`, as the lease-store sends one.
    pub fn ok(body: impl Into<Vec<u8>>) -> Answer {
        Answer::Received {
            status: Some(200),
            body: body.into(),
            framed: false,
        }
    }

    /// A 200 answer with a framed claim answer, as the lease-store sends a replay to a
    /// claim that asks for frames.
    pub fn framed(frame: impl Into<Vec<u8>>) -> Answer {
        Answer::Received {
            status: Some(200),
            body: frame.into(),
            framed: true,
        }
    }

    /// The status and body, or why there is no answer to read.
    pub(super) fn http(&self) -> Result<(u16, &[u8]), CallError> {
        match self {
            Answer::NotSent => Err(CallError::Dispatch),
            Answer::Received { status: None, .. } => Err(CallError::NoAnswer),
            Answer::Received {
                status: Some(status),
                body,
                ..
            } => Ok((*status, body)),
        }
    }

    /// Whether the body is a frame.
    pub(super) fn is_framed(&self) -> bool {
        matches!(self, Answer::Received { framed: true, .. })
    }
}

/// Why a call did not produce a usable answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The host refused to dispatch it (unknown cluster, bad headers).
    #[error("the call could not be dispatched")]
    Dispatch,
    /// No response: connection failure, reset or timeout.
    #[error("no answer (connection failure or timeout)")]
    NoAnswer,
    /// An HTTP status other than the expected one.
    #[error("answered with HTTP {0}")]
    Status(u16),
    /// `409 lease_lost`: another claim owns the record now (L2).
    #[error("the lease was lost to another claim")]
    LeaseLost,
    /// A 200 whose body is not the expected JSON.
    #[error("the answer could not be parsed")]
    Malformed,
    /// A claim's `completed` answer whose recorded response cannot be read
    /// (a body that is not base64, a status out of range, a damaged frame):
    /// the operation ran, so the request is refused, never forwarded, whatever
    /// the policy's `failure_mode`.
    #[error("the recorded response could not be read")]
    MalformedRecord,
}

/// Splits a batch's answer into the answer each of its `calls` calls would have had
/// alone. `Err` gives back the whole answer when it is not a readable batch answer of
/// `calls` entries: a failed call, a refusal, garbage — then no call has an answer of
/// its own, and each must be treated as if its own call had failed so.
pub fn split_batch_answer(answer: Answer, calls: usize) -> Result<Vec<Answer>, Answer> {
    let split = match &answer {
        Answer::Received {
            status: Some(200),
            body,
            framed: false,
        } => serde_json::from_slice::<BorrowedBatchAnswer<'_>>(body)
            .ok()
            .filter(|batch| batch.answers.len() == calls)
            .map(|batch| {
                batch
                    .answers
                    .into_iter()
                    .map(|one| Answer::Received {
                        status: Some(one.status),
                        body: one.body.get().as_bytes().to_vec(),
                        framed: false,
                    })
                    .collect()
            }),
        _ => None,
    };
    split.ok_or(answer)
}
