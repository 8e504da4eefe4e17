//! Renew, finalize and release: the winner's writes, fenced by `claim_id` (L2).
//!
//! Each answers 200 when the caller still owns the lease and 409 `lease_lost`
//! when another claim took it over; the store makes the stale write a no-op,
//! so a lost lease can never overwrite a newer record. Finalize and release
//! also answer 200 when they repeat a call of the same claim that already
//! landed (the filter resends calls whose answer it never saw). Every call is counted
//! as an event, and a lost lease is counted as `lease_lost` whichever call
//! discovered it.

use axum::extract::State;
use axum::{Extension, Json};
use keyflight_protocol::wire::{
    FinalizeRequest, MAX_COOLDOWN_MS, MAX_LEASE_MS, ReleaseRequest, RenewRequest, RenewResponse,
};

use super::claims::{charged, store_place};
use super::limits::Slot;
use super::{ApiJson, AppState, RecordScope, fits_a_record, recordable, within};
use crate::api::error::ApiError;
use crate::evidence;
use crate::metrics::{Event, Metrics};
use crate::shares::Charged;
use crate::store::StoreError;

/// Extends the caller's lease.
#[utoipa::path(
    post,
    path = "/v1/claims/{scope}/renew",
    tag = "claims",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    request_body = RenewRequest,
    responses(
        (status = 200, description = "Lease extended", body = RenewResponse),
        (status = 409, description = "`lease_lost`: another claim owns the record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn renew(
    State(state): State<AppState>,
    record: RecordScope,
    ApiJson(mut request): ApiJson<RenewRequest>,
) -> Result<Json<RenewResponse>, ApiError> {
    let scope = record.scope;
    request.previous_scope = record.previous_scope(request.previous_scope);
    within("lease_ms", request.lease_ms, 1..=MAX_LEASE_MS)?;
    let store = state.store.clone();
    let answer = to_the_end(async move {
        let answer = store.renew(&scope, &request).await;
        evidence::renewed(&scope, &request, &answer);
        answer
    })
    .await;
    counted(&state.metrics, Event::Renew, answer).map(Json)
}

/// Records the upstream's response and settles the record as `completed`.
///
/// Headers that break the recorded-header rule (F8) are refused with 400
/// before anything is written, naming the header's index.
#[utoipa::path(
    post,
    path = "/v1/claims/{scope}/finalize",
    tag = "claims",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    request_body = FinalizeRequest,
    responses(
        (status = 200, description = "Response recorded (or this claim already recorded it: a repeat is a success)"),
        (status = 400, description = "`bad_request`: malformed body, or a header that may not be recorded (not an RFC 9110 token, a control character in the value, a never-stored name); the detail names `response.headers[i]`", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`lease_lost`: another claim owns the record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the body exceeds --max-body-bytes, or the response body --max-record-bytes", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn finalize(
    State(state): State<AppState>,
    record: RecordScope,
    slot: Option<Extension<Slot>>,
    ApiJson(request): ApiJson<FinalizeRequest>,
) -> Result<(), ApiError> {
    let caller = charged(slot.map(|Extension(slot)| slot).as_ref(), &record);
    answer_finalize(&state, record, request, caller).await
}

/// One finalize, checked, run to the end and counted: what
/// `POST /v1/claims/{scope}/finalize` answers, and what a batch answers for each of its
/// finalizes (`api/batch.rs`). The statement waits for `caller`'s place in the database
/// pool ([`AppState::store_places`]), and runs to its end with it.
pub async fn answer_finalize(
    state: &AppState,
    record: RecordScope,
    mut request: FinalizeRequest,
    caller: Charged,
) -> Result<(), ApiError> {
    let scope = record.scope;
    request.previous_scope = record.previous_scope(request.previous_scope);
    recordable(&request.response)?;
    fits_a_record(&request.response, &state.bounds)?;
    let (claim_id, call) = (
        request.claim_id,
        evidence::finalize_call(request.replayable),
    );
    let store = state.store.clone();
    let place = store_place(state, caller).await?;
    let answer = to_the_end(async move {
        let answer = store.finalize(&scope, request).await;
        drop(place);
        evidence::settled(&scope, claim_id, call, &answer);
        answer
    })
    .await;
    counted(&state.metrics, Event::Finalize, answer)
}

/// Gives the lease up: cooldown (`failed`), `unknown`, or forget the record.
#[utoipa::path(
    post,
    path = "/v1/claims/{scope}/release",
    tag = "claims",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    request_body = ReleaseRequest,
    responses(
        (status = 200, description = "Lease released (or this claim already released it the same way: a repeat is a success)"),
        (status = 409, description = "`lease_lost`: another claim owns the record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn release(
    State(state): State<AppState>,
    record: RecordScope,
    ApiJson(mut request): ApiJson<ReleaseRequest>,
) -> Result<(), ApiError> {
    let scope = record.scope;
    request.previous_scope = record.previous_scope(request.previous_scope);
    if let Some(cooldown_ms) = request.cooldown_ms {
        within("cooldown_ms", cooldown_ms, 0..=MAX_COOLDOWN_MS)?;
    }
    let store = state.store.clone();
    let answer = to_the_end(async move {
        let answer = store.release(&scope, &request).await;
        let call = evidence::release_call(request.release_as);
        evidence::released(&scope, request.claim_id, call, &answer);
        answer.map(drop)
    })
    .await;
    counted(&state.metrics, Event::Release, answer)
}

/// Runs a fenced write and its evidence line to the end even when its caller hangs up (a
/// store frozen mid-call, a row lock held past the caller's timeout): the statement may
/// commit all the same, and a judge times the record (or the lease) from that line.
async fn to_the_end<T: Send + 'static>(
    settle: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::spawn(settle).await.unwrap_or_else(|failed| {
        Err(StoreError::Unavailable(format!(
            "the settle call failed: {failed}"
        )))
    })
}

/// Counts a fenced write as `event` when it landed, or as `lease_lost`.
fn counted<T>(
    metrics: &Metrics,
    event: Event,
    answer: Result<T, StoreError>,
) -> Result<T, ApiError> {
    match &answer {
        Ok(_) => metrics.event(event),
        Err(StoreError::LeaseLost) => metrics.event(Event::LeaseLost),
        Err(_) => {}
    }
    Ok(answer?)
}
