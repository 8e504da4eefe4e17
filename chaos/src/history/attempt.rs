//! The callers' side of a run: every HTTP request a caller sent ([`Attempt`]), why it
//! sent it ([`Role`]) and what it got ([`Outcome`]), with the readings of an outcome the
//! judge's rows ask for (success, unavailable, a problem code).

use serde::{Deserialize, Serialize};

use super::Ms;

/// What one caller attempt got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// A complete HTTP answer.
    Answered {
        /// Its status.
        status: u16,
        /// Its body (lossy UTF-8: the demo answers JSON).
        body: String,
        /// `idempotent-replayed: true` was set.
        replayed: bool,
        /// The problem `code` of an `application/problem+json` answer.
        problem_code: Option<String>,
    },
    /// The caller gave up: its timeout ran out before the answer came.
    GaveUp,
    /// No complete answer: the connection was refused, reset or closed (a killed Envoy).
    ConnectionError {
        /// What the HTTP client said.
        error: String,
    },
}

impl Outcome {
    /// The answer, when it is a success (2xx): what a caller would keep as the operation's result.
    pub fn success(&self) -> Option<(u16, &str)> {
        match self {
            Outcome::Answered { status, body, .. } if (200..300).contains(status) => {
                Some((*status, body.as_str()))
            }
            _ => None,
        }
    }

    /// Whether it never reached the record: the store was unavailable (503
    /// `journal_unavailable`), or there was no answer at all.
    pub fn unavailable(&self) -> bool {
        match self {
            Outcome::Answered { problem_code, .. } => {
                problem_code.as_deref() == Some("journal_unavailable")
            }
            Outcome::GaveUp | Outcome::ConnectionError { .. } => true,
        }
    }

    /// The problem `code` of an answer that carried one.
    pub fn problem_code(&self) -> Option<&str> {
        match self {
            Outcome::Answered { problem_code, .. } => problem_code.as_deref(),
            Outcome::GaveUp | Outcome::ConnectionError { .. } => None,
        }
    }

    /// The label this outcome is counted under when it is not a success: the problem
    /// code, `http_<status>` for another non-2xx answer, `client_gave_up` or
    /// `connection_error`.
    pub fn error_label(&self) -> Option<String> {
        match self {
            Outcome::Answered { status, .. } if (200..300).contains(status) => None,
            Outcome::Answered {
                problem_code: Some(code),
                ..
            } => Some(code.clone()),
            Outcome::Answered { status, .. } => Some(format!("http_{status}")),
            Outcome::GaveUp => Some("client_gave_up".to_owned()),
            Outcome::ConnectionError { .. } => Some("connection_error".to_owned()),
        }
    }
}

/// Why a caller sent its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// One of the concurrent first callers of a key (a duplicate of the others).
    First,
    /// A retry sent after the first callers were done.
    Late,
    /// The same key with another body: expects 409 `idempotency_conflict`.
    Conflict,
}

/// One HTTP request a caller sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Unique in the run; sent as `x-caller-request-id`, so the upstream's log names it.
    pub id: String,
    /// The idempotency key.
    pub key: String,
    /// The caller that sent it (unique in the run).
    pub caller: String,
    /// Why that caller exists.
    pub role: Role,
    /// 0-based attempt number of its caller.
    pub attempt: u32,
    /// Which Envoy it was sent to.
    pub envoy: usize,
    /// `sha256:<hex>` of the body sent.
    pub body_sha256: String,
    /// How long the caller was prepared to wait.
    pub timeout_ms: u64,
    /// When it was sent.
    pub start_ms: Ms,
    /// When its outcome was known.
    pub end_ms: Ms,
    /// What it got.
    pub outcome: Outcome,
}

impl Attempt {
    /// When the caller received its answer; `None` when it received none.
    pub fn answered_at(&self) -> Option<Ms> {
        matches!(self.outcome, Outcome::Answered { .. }).then_some(self.end_ms)
    }
}
