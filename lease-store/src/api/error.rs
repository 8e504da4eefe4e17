//! The API's error type: every error the HTTP API can answer, and its one
//! mapping to RFC 9457 problem details (F10, `docs/records.md#the-api`).
//!
//! Handlers and extractors return [`ApiError`]; this module is the only place
//! that decides a problem `code` and a `detail` text, so the API's error
//! contract is readable in one `match`. The HTTP status comes from the
//! protocol's one table ([`ProblemCode::status`]), shared with the filter.
//! The response carries the [`ProblemCode`] in its extensions too, which lets
//! the metrics middleware count errors by code without re-parsing bodies. A
//! batched call's problem is the same [`ApiError::into_problem`], carried in the
//! batch's answer and counted by the batch (`api/batch.rs`).
//!
//! Store failures keep their cause out of the answer: `journal_unavailable`
//! says the database cannot be reached, a value the database refused is a
//! generic `bad_request`, and the database's own text (which names tables,
//! constraints and values) goes to the log, not to the caller.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem, ProblemCode, retry_after_s};

use crate::caller::Refused;
use crate::log_limit::{self, Kind};
use crate::quota::Exceeded;
use crate::store::StoreError;

/// An API call's failure.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The store could not do what was asked.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Malformed input; the text says which field.
    #[error("{0}")]
    BadRequest(String),
    /// The body exceeds the configured limit.
    #[error("the request body exceeds the lease-store's limit (--max-body-bytes)")]
    PayloadTooLarge,
    /// A response to record is larger than `--max-record-bytes` (the value).
    #[error("the response body exceeds the {0} bytes a record may hold (--max-record-bytes)")]
    RecordTooLarge(usize),
    /// No bearer token, or not one this store knows.
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// A data-plane call without a usable, allowlisted mesh identity (`--trust-xfcc`).
    #[error("{}", .0.detail())]
    NoMeshIdentity(Refused),
    /// A known token that may not call this endpoint.
    #[error("{0}")]
    Forbidden(&'static str),
    /// `DELETE /v1/records/{scope}` without the acknowledgment header.
    #[error(
        "erasing a record lets a retry run the operation again; send `keyflight-ack-replay-risk: true` to confirm"
    )]
    ReplayRiskNotAcknowledged,
    /// No route matches the path.
    #[error("no such endpoint")]
    NoRoute,
    /// The replica is at a limit and turns the call away at once (503, `Retry-After`).
    #[error("{0}")]
    Overloaded(&'static str),
    /// The call was not read and answered within `--request-timeout` (503).
    #[error("the call was not read and answered within the lease-store's --request-timeout; retry")]
    TimedOut,
    /// The caller's workload reached its storage quota and the claim would add a record.
    #[error(transparent)]
    StorageQuota(#[from] Exceeded),
    /// The path exists, but not with this method; the router adds `Allow`.
    #[error("{0} is not allowed on this endpoint; the Allow header lists the methods that are")]
    MethodNotAllowed(axum::http::Method),
}

impl ApiError {
    /// The problem code for this error.
    pub fn code(&self) -> ProblemCode {
        match self {
            ApiError::Store(err) => match err {
                StoreError::Unavailable(_) | StoreError::ReadOnly(_) => {
                    ProblemCode::JournalUnavailable
                }
                StoreError::LeaseLost => ProblemCode::LeaseLost,
                StoreError::NotFound => ProblemCode::NotFound,
                StoreError::NotUnknown => ProblemCode::NotUnknown,
                StoreError::Invalid(_) | StoreError::Rejected(_) => ProblemCode::BadRequest,
            },
            ApiError::BadRequest(_) => ProblemCode::BadRequest,
            ApiError::PayloadTooLarge | ApiError::RecordTooLarge(_) => ProblemCode::PayloadTooLarge,
            ApiError::Unauthorized => ProblemCode::Unauthorized,
            ApiError::NoMeshIdentity(Refused::NotAllowed) => ProblemCode::Forbidden,
            ApiError::NoMeshIdentity(_) => ProblemCode::Unauthorized,
            ApiError::Forbidden(_) => ProblemCode::Forbidden,
            ApiError::ReplayRiskNotAcknowledged => ProblemCode::ReplayRiskNotAcknowledged,
            ApiError::Overloaded(_) | ApiError::TimedOut => ProblemCode::JournalUnavailable,
            ApiError::NoRoute => ProblemCode::NotFound,
            ApiError::MethodNotAllowed(_) => ProblemCode::MethodNotAllowed,
            ApiError::StorageQuota(_) => ProblemCode::StorageQuota,
        }
    }

    /// The `detail` text shown to the caller.
    fn detail(&self) -> String {
        match self {
            ApiError::Store(StoreError::Unavailable(_) | StoreError::ReadOnly(_)) => {
                "the lease-store cannot reach its database; retry shortly".to_owned()
            }
            ApiError::Store(StoreError::LeaseLost) => {
                "this claim no longer owns the lease (it expired and was taken over)".to_owned()
            }
            ApiError::Store(StoreError::NotFound) => "no record with this scope".to_owned(),
            ApiError::Store(StoreError::NotUnknown) => {
                "only a record in the `unknown` state can be resolved".to_owned()
            }
            ApiError::Store(StoreError::Invalid(reason)) => reason.clone(),
            ApiError::Store(StoreError::Rejected(_)) => {
                "the database refused a value of this request".to_owned()
            }
            other => other.to_string(),
        }
    }
}

/// A JSON body that failed to parse: 413 when too large, else 400 naming the field.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::PayloadTooLarge;
        }
        ApiError::BadRequest(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::BadRequest(rejection.body_text())
    }
}

impl ApiError {
    /// The problem this error answers: the single route's body, and a batched call's
    /// (`api/batch.rs`), so the two cannot differ. The causes that stay out of the answer
    /// are logged here, rate-limited: an outage fails every call alike (the metrics count
    /// each one).
    pub fn into_problem(self) -> Problem {
        if let ApiError::Store(StoreError::Unavailable(cause) | StoreError::ReadOnly(cause)) = &self
            && let Some(suppressed) = log_limit::global().admit(Kind::DatabaseUnavailable)
        {
            tracing::warn!(%cause, suppressed, "database unavailable");
        }
        if let ApiError::Store(StoreError::Rejected(cause)) = &self
            && let Some(suppressed) = log_limit::global().admit(Kind::DatabaseRefused)
        {
            tracing::warn!(%cause, suppressed, "the database refused a request value");
        }
        let code = self.code();
        Problem::new(code, code.status(), self.detail())
    }
}

/// Marks an answer that turned a call away at a limit ([`ApiError::Overloaded`]), so that
/// [`crate::api::limits::pace_refusals`] can hold it back.
#[derive(Debug, Clone, Copy)]
pub struct TurnedAway;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let turned_away = matches!(self, ApiError::Overloaded(_));
        let mut response = problem_answer(self.into_problem());
        if turned_away {
            response.extensions_mut().insert(TurnedAway);
        }
        response
    }
}

/// Renders `code` as an `application/problem+json` answer with its status
/// from the protocol's table and the headers that status needs.
pub fn problem_response(code: ProblemCode, detail: impl Into<String>) -> Response {
    problem_answer(Problem::new(code, code.status(), detail))
}

/// Renders `problem` as an `application/problem+json` answer with the headers its
/// status needs, its code in the extensions for the metrics middleware.
fn problem_answer(problem: Problem) -> Response {
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
    );
    if let Some(seconds) = retry_after_s(status.as_u16(), None) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response.extensions_mut().insert(problem.code);
    response
}
