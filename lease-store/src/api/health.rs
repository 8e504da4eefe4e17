//! The operability endpoints (L8): liveness, readiness, metrics, OpenAPI.
//!
//! None of these needs a token: probes and scrapers must work without
//! secrets, and none of them reveals a record. `/readyz` is the one that
//! touches the database: it answers 503 until Postgres is reachable and its
//! schema is current, so a rolling deploy sends no traffic to a replica whose
//! migrations have not run yet.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use keyflight_protocol::problem::{Problem, ProblemCode};
use serde_json::{Value, json};

use super::AppState;
use super::error::problem_response;
use crate::log_limit::{self, Kind};
use crate::metrics::{self, BatchQueued, PoolStatus};
use crate::openapi;
use crate::store::BatchKind;

/// The process is alive (no dependency is checked).
#[utoipa::path(get, path = "/healthz", tag = "operability",
    responses((status = 200, description = "Alive")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database is reachable and its migrations are current.
#[utoipa::path(get, path = "/readyz", tag = "operability",
    responses(
        (status = 200, description = "Ready"),
        (status = 503, description = "Database unreachable or migrations not current", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    match state.store.readiness().await {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(cause) => {
            if let Some(suppressed) = log_limit::global().admit(Kind::NotReady) {
                tracing::warn!(%cause, suppressed, "not ready");
            }
            problem_response(
                ProblemCode::JournalUnavailable,
                "not ready: the database is unreachable or its migrations are not current",
            )
        }
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "operability",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let pool = state.store.pool_status();
    let text = state.metrics.render(
        PoolStatus {
            size: pool.size,
            available: pool.available,
            waiting: pool.waiting,
            settings_missing: state.store.session_settings_missing(),
        },
        state.longpoll.waiting(),
        BatchQueued {
            claims: state.store.batch_queued(BatchKind::Claim),
            finalizes: state.store.batch_queued(BatchKind::Finalize),
        },
    );
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response()
}

/// This API's OpenAPI document.
#[utoipa::path(get, path = "/openapi.json", tag = "operability",
    responses((status = 200, description = "OpenAPI document", content_type = "application/json")))]
pub async fn openapi() -> Json<Value> {
    Json(openapi::document())
}
