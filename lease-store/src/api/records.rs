//! The operator API (L6): list, show, resolve and erase records.
//!
//! On the admin listener, behind an operator's named token (see [`crate::auth`]).
//! Erasure is the dangerous one: a retry of an erased scope runs the operation
//! again, so the call must carry `keyflight-ack-replay-risk: true`. Erase and
//! resolve must give a `reason`, and each writes a row of the operator audit
//! (who, why, which scope, and the digest of a response the operator authored)
//! in the same statement as the change, and a log line with the operator's name
//! and the scope digest only — never a key or principal, which the store does not
//! have anyway.

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::{Extension, Json};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ACK_REPLAY_RISK_HEADER, RecordDetail, RecordList, RecordState, ResolveRequest,
};
use serde::Deserialize;

use super::{ApiJson, AppState, Scope, fits_a_record, operator_reason, recordable};
use crate::api::error::ApiError;
use crate::auth::Operator;
use crate::evidence;
use crate::metrics::Event;

/// Records listed when the caller does not say.
pub const DEFAULT_LIMIT: u32 = 100;
/// The most records one list call returns.
pub const MAX_LIMIT: u32 = 1000;

/// Query of `GET /v1/records`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only records in this state (`pending`, `completed`, `failed`, `unknown`).
    state: Option<RecordState>,
    /// At most this many records (1–1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// Query of `DELETE /v1/records/{scope}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EraseQuery {
    /// Why the operator erases the record (1–1000 characters, no control characters); kept
    /// in the audit.
    #[param(
        required = true,
        min_length = 1,
        max_length = 1000,
        pattern = r"^[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    reason: Option<String>,
}

/// Lists records, newest first, without bodies.
#[utoipa::path(
    get,
    path = "/v1/records",
    tag = "records",
    params(ListQuery),
    responses((status = 200, description = "Matching records", body = RecordList)),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RecordList>, ApiError> {
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    Ok(Json(state.store.list(query.state, limit).await?))
}

/// Shows one record with its recorded response.
#[utoipa::path(
    get,
    path = "/v1/records/{scope}",
    tag = "records",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    responses(
        (status = 200, description = "The record", body = RecordDetail),
        (status = 404, description = "No such record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn show(
    State(state): State<AppState>,
    Scope(scope): Scope,
) -> Result<Json<RecordDetail>, ApiError> {
    Ok(Json(state.store.get(&scope).await?))
}

/// Settles an `unknown` record as `completed` (with a response) or `failed`.
///
/// A response whose headers break the recorded-header rule (F8) is refused
/// with 400, as on finalize.
#[utoipa::path(
    post,
    path = "/v1/records/{scope}/resolve",
    tag = "records",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    request_body = ResolveRequest,
    responses(
        (status = 200, description = "Resolved"),
        (status = 400, description = "`bad_request`: malformed body, or a header that may not be recorded; the detail names `response.headers[i]`", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_unknown`: the record is not in the unknown state", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn resolve(
    State(state): State<AppState>,
    Scope(scope): Scope,
    Extension(Operator(operator)): Extension<Operator>,
    ApiJson(request): ApiJson<ResolveRequest>,
) -> Result<(), ApiError> {
    resolve_as_operator(&state, &scope, &request, &operator).await
}

/// Resolves `scope` as `request` says, decided by `operator`: the one path of the admin API
/// (and so the CLI) and the console (`crate::console`). The store writes the audit row in
/// the statement that resolves.
pub async fn resolve_as_operator(
    state: &AppState,
    scope: &Digest,
    request: &ResolveRequest,
    operator: &str,
) -> Result<(), ApiError> {
    operator_reason(Some(&request.reason))?;
    if let Some(response) = &request.response {
        recordable(response)?;
        fits_a_record(response, &state.bounds)?;
    }
    state.store.resolve(scope, request, operator).await?;
    state.metrics.event(Event::Resolve);
    evidence::operator_changed(
        scope,
        evidence::resolve_action(request.resolve_as),
        operator,
    );
    tracing::info!(scope = %scope.to_hex(), resolved_as = ?request.resolve_as, %operator, reason = %request.reason, "record resolved by an operator");
    Ok(())
}

/// Deletes a record: the next request with its key runs again (replay risk).
#[utoipa::path(
    delete,
    path = "/v1/records/{scope}",
    tag = "records",
    params(
        ("scope" = String, Path, description = "Scope digest, 64 lowercase hex"),
        ("keyflight-ack-replay-risk" = String, Header, description = "Must be `true`: the caller accepts that a retry will run the operation again"),
        EraseQuery,
    ),
    responses(
        (status = 200, description = "Erased"),
        (status = 400, description = "`replay_risk_not_acknowledged`, or `bad_request`: no usable `reason`", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn erase(
    State(state): State<AppState>,
    Scope(scope): Scope,
    Extension(Operator(operator)): Extension<Operator>,
    query: Result<Query<EraseQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<(), ApiError> {
    let acknowledged = headers
        .get(ACK_REPLAY_RISK_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    if !acknowledged {
        return Err(ApiError::ReplayRiskNotAcknowledged);
    }
    let Query(query) = query?;
    erase_as_operator(&state, &scope, &operator, query.reason.as_deref()).await
}

/// Erases `scope`, decided by `operator`, who has acknowledged the replay risk: the one path
/// of the admin API (and so the CLI) and the console (`crate::console`). The store writes the
/// audit row in the statement that erases.
pub async fn erase_as_operator(
    state: &AppState,
    scope: &Digest,
    operator: &str,
    reason: Option<&str>,
) -> Result<(), ApiError> {
    let reason = operator_reason(reason)?;
    state.store.erase(scope, operator, reason).await?;
    state.metrics.event(Event::Erase);
    evidence::operator_changed(scope, "erase", operator);
    tracing::warn!(scope = %scope.to_hex(), %operator, %reason, "record erased by an operator: a retry with its key will run again");
    Ok(())
}
