//! The ledger's errors as HTTP answers (feature `axum`), so a handler can return them with
//! `?`: a conflict is keyflight's own `idempotency_conflict` problem, with the status
//! keyflight answers it by default, and anything else (a fenced-out run included) a 503, which keyflight treats as a
//! failure a same-body retry may run again (the ledger then tells that retry what
//! committed: `docs/effects.md#the-protocol`).

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use keyflight_protocol::ProblemCode;
use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem};
use serde_json::json;

use crate::ledger::Error;

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, problem) = match self {
            Error::Conflict { .. } => (
                StatusCode::CONFLICT,
                serde_json::to_value(Problem::new(
                    ProblemCode::IdempotencyConflict,
                    StatusCode::CONFLICT.as_u16(),
                    "this idempotency key was used for another request",
                ))
                .unwrap_or_default(),
            ),
            // Not a conflict: keyflight already let a higher fence run this operation.
            Error::Fenced { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "type": "about:blank",
                    "title": "Service Unavailable",
                    "status": 503,
                    "detail": "this run was fenced out: keyflight reconciled the operation as not committed",
                }),
            ),
            // The database's own words stay in the service's logs.
            _ => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "type": "about:blank",
                    "title": "Service Unavailable",
                    "status": 503,
                    "detail": "the effect ledger did not answer",
                }),
            ),
        };
        (
            status,
            [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)],
            Json(problem),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(error: Error) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = error.into_response();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (
            status,
            content_type,
            serde_json::from_slice(&body).unwrap_or_default(),
        )
    }

    #[tokio::test]
    async fn a_conflict_is_keyflights_409_problem() {
        let (status, content_type, problem) = answer(Error::Conflict { fence: 4 }).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(content_type.as_deref(), Some(PROBLEM_CONTENT_TYPE));
        assert_eq!(problem["code"], "idempotency_conflict");
        assert_eq!(problem["status"], 409);
    }

    #[tokio::test]
    async fn a_fenced_run_is_a_503_that_says_so() {
        let (status, _, problem) = answer(Error::Fenced { through: 3 }).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            problem["detail"].to_string().contains("fenced out"),
            "{problem}"
        );
    }

    #[tokio::test]
    async fn anything_else_is_a_503_without_the_databases_words() {
        let (status, _, problem) = answer(Error::Unexpected("secret".into())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(!problem.to_string().contains("secret"), "{problem}");
    }
}
