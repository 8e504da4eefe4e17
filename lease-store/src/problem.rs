//! Every error the HTTP API can answer, and its one mapping to RFC 9457 (F10).
//!
//! Handlers and extractors return [`ApiError`]; this module is the only place
//! that decides a status code, a problem `code` and a `detail` text, so the
//! contract in SPEC §6 is readable in one `match`. The response carries the
//! [`ProblemCode`] in its extensions too, which lets the metrics middleware
//! count errors by code without re-parsing bodies.
//!
//! Store failures keep their cause out of the answer: `journal_unavailable`
//! says the database cannot be reached, and the underlying error goes to the
//! log, not to the caller.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem, ProblemCode};

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
    /// No bearer token, or not one this store knows.
    #[error("a valid bearer token is required")]
    Unauthorized,
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
    /// The path exists, but not with this method; the router adds `Allow`.
    #[error("{0} is not allowed on this endpoint; the Allow header lists the methods that are")]
    MethodNotAllowed(axum::http::Method),
}

impl ApiError {
    /// The problem code and HTTP status for this error.
    pub fn code_and_status(&self) -> (ProblemCode, StatusCode) {
        match self {
            ApiError::Store(err) => match err {
                StoreError::Unavailable(_) | StoreError::ReadOnly(_) => (
                    ProblemCode::JournalUnavailable,
                    StatusCode::SERVICE_UNAVAILABLE,
                ),
                StoreError::LeaseLost => (ProblemCode::LeaseLost, StatusCode::CONFLICT),
                StoreError::NotFound => (ProblemCode::NotFound, StatusCode::NOT_FOUND),
                StoreError::NotUnknown => (ProblemCode::NotUnknown, StatusCode::CONFLICT),
                StoreError::Invalid(_) => (ProblemCode::BadRequest, StatusCode::BAD_REQUEST),
            },
            ApiError::BadRequest(_) => (ProblemCode::BadRequest, StatusCode::BAD_REQUEST),
            ApiError::PayloadTooLarge => {
                (ProblemCode::PayloadTooLarge, StatusCode::PAYLOAD_TOO_LARGE)
            }
            ApiError::Unauthorized => (ProblemCode::Unauthorized, StatusCode::UNAUTHORIZED),
            ApiError::Forbidden(_) => (ProblemCode::Forbidden, StatusCode::FORBIDDEN),
            ApiError::ReplayRiskNotAcknowledged => (
                ProblemCode::ReplayRiskNotAcknowledged,
                StatusCode::BAD_REQUEST,
            ),
            ApiError::NoRoute => (ProblemCode::NotFound, StatusCode::NOT_FOUND),
            ApiError::MethodNotAllowed(_) => (
                ProblemCode::MethodNotAllowed,
                StatusCode::METHOD_NOT_ALLOWED,
            ),
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, status) = self.code_and_status();
        if let ApiError::Store(StoreError::Unavailable(cause) | StoreError::ReadOnly(cause)) = &self
        {
            tracing::warn!(%cause, "database unavailable");
        }
        let problem = Problem::new(code, status.as_u16(), self.detail());
        problem_response(status, problem)
    }
}

/// Renders a problem as `application/problem+json`, with the headers its status needs.
pub fn problem_response(status: StatusCode, problem: Problem) -> Response {
    let code = problem.code;
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
    );
    match status {
        StatusCode::SERVICE_UNAVAILABLE => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        StatusCode::UNAUTHORIZED => {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        _ => {}
    }
    response.extensions_mut().insert(code);
    response
}
