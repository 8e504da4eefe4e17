//! `POST /v1/claims/{scope}`: claim a lease, or learn the scope's state (L1, L4).
//!
//! The first attempt is one claim statement. Only when it finds the same
//! request still running (`in_progress`) and the caller allowed a wait does
//! the call turn into a long-poll, capped by the store's `--max-wait`; that is
//! what the `follower_wait` event counts. Winners, replays and conflicts
//! therefore cost exactly one statement, and a long-poll re-checks the record
//! itself, so nothing that settles between the two steps is missed.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::{
    ClaimAnswer, ClaimRequest, ClaimResponse, MAX_LEASE_MS, MAX_WAIT_MS, framed,
};

use super::budget::AnswerAccount;
use super::limits::Slot;
use super::{ApiJson, AppState, RecordScope, within};
use crate::api::error::ApiError;
use crate::evidence;
use crate::longpoll::{self, Full};
use crate::metrics::{Event, Shed};
use crate::shares::{Charged, Taken};
use crate::store::StoreError;

/// Claims the lease on `scope`, or answers its state; long-polls when `wait_ms > 0`.
#[utoipa::path(
    post,
    path = "/v1/claims/{scope}",
    tag = "claims",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "The claim's outcome. A `completed` one comes as a frame (its JSON with `body_b64` empty, a newline, the body's bytes) when `Accept` names application/vnd.keyflight.framed.v1 (docs/records.md#the-recorded-body-as-bytes)", content(
            (ClaimAnswer = "application/json"),
            (crate::openapi::FramedClaimAnswer = "application/vnd.keyflight.framed.v1"),
        )),
        (status = 400, description = "`bad_request`: malformed body or a value out of range; or `previous` named while the store moves workloads into their own namespaces (`--namespace-transition`)", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 507, description = "`storage_quota`: the caller's workload keeps as many records or bytes as its storage quota allows, and this claim would add a record (docs/records.md#storage-quota)", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn claim(
    State(state): State<AppState>,
    record: RecordScope,
    slot: Option<Extension<Slot>>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ClaimRequest>,
) -> Result<Response, ApiError> {
    let slot = slot.map(|Extension(slot)| slot);
    let caller = charged(slot.as_ref(), &record);
    let answer = answer_claim(&state, record, request, (slot.as_ref(), caller, None)).await?;
    Ok(if frames_accepted(&headers) {
        framed_or_json(answer, &state)
    } else {
        Json(answer).into_response()
    })
}

/// The caller's place in the database pool ([`AppState::store_places`]), waited for no
/// longer than the pool itself would be: a call that gets none fails as a database that does
/// not answer does (503 `journal_unavailable`).
pub async fn store_place(state: &AppState, caller: Charged) -> Result<Taken, ApiError> {
    state
        .store_places
        .enter_within(caller, state.store.answer_timeout())
        .await
        .ok_or_else(|| {
            ApiError::Store(StoreError::Unavailable(
                "no database connection was free for this caller within --statement-timeout".into(),
            ))
        })
}

/// Whose share a call's database work is charged to: its slot's caller (the workload, or
/// the peer address), else the record's namespace.
pub fn charged(slot: Option<&Slot>, record: &RecordScope) -> Charged {
    slot.map_or_else(|| record.charged(), |slot| slot.caller().clone())
}

/// Whether the caller's `Accept` names frames (an edge that reads them).
fn frames_accepted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(framed::accepted)
}

/// A `completed` answer as a frame, any other as JSON
/// (`docs/records.md#the-recorded-body-as-bytes`).
fn framed_or_json(answer: ClaimAnswer, state: &AppState) -> Response {
    match framed::write(answer) {
        Ok(frame) => {
            state.metrics.framed_answer();
            ([(header::CONTENT_TYPE, framed::MEDIA_TYPE)], frame).into_response()
        }
        Err(answer) => Json(answer).into_response(),
    }
}

/// One claim, checked, run and counted: what `POST /v1/claims/{scope}` answers, and what a
/// batch answers for each of its claims (`api/batch.rs`). `slot` is the call's place under
/// the concurrency cap, given back before a long-poll parks; a batch has none to give, as
/// its claims never wait. The claim statement waits for `caller`'s place in the database
/// pool ([`AppState::store_places`]); a batched claim whose batch has had a replay shed by
/// then gives the place back unused (`account`: its answer could not be sent either).
pub async fn answer_claim(
    state: &AppState,
    record: RecordScope,
    mut request: ClaimRequest,
    (slot, caller, account): (Option<&Slot>, Charged, Option<&AnswerAccount>),
) -> Result<ClaimAnswer, ApiError> {
    let received = Instant::now();
    let scope = record.scope;
    request.previous = record.previous_identity(request.previous.take(), request.fingerprint)?;
    within("lease_ms", request.lease_ms, 1..=MAX_LEASE_MS)?;
    within("wait_ms", request.wait_ms.unwrap_or(0), 0..=MAX_WAIT_MS)?;
    if let Some(retention_s) = request.retention_s {
        within("retention_s", retention_s, 1..=state.bounds.max_retention_s)?;
    }
    let wait = clamp_wait(request.wait_ms, state.max_wait);
    request.wait_ms = Some(wait);
    let place = store_place(state, caller).await?;
    if let Some(account) = account {
        account.still_open()?;
    }
    within_quota(state, &record).await?;
    let first = state
        .store
        .claim_as(&scope, &request, record.workload())
        .await?;
    drop(place);
    let record_expires_in_ms = first
        .record_expires_at
        .map(|at| millis(at.saturating_duration_since(Instant::now())));
    let attempt = match &first.response {
        ClaimResponse::InProgress { .. } if wait > 0 => {
            match state.longpoll.subscribe_as(&scope, record.charged()) {
                Ok(subscription) => {
                    state.metrics.event(Event::FollowerWait);
                    // A parked long-poll holds no database connection; its caps are its own.
                    if let Some(slot) = slot {
                        slot.release();
                    }
                    longpoll::wait_subscribed(
                        &state.store,
                        &state.longpoll,
                        subscription,
                        &request,
                        record.workload(),
                    )
                    .await?
                }
                Err(full) => {
                    state.metrics.shed(match full {
                        Full::Scope => Shed::LongPollScope,
                        Full::Total => Shed::LongPollTotal,
                        Full::Share => Shed::LongPollShare,
                    });
                    first
                }
            }
        }
        _ => first,
    };
    // Up to the winning statement's send: its lease started no later, and a reply held
    // back after that is the lease's age (`docs/stream-machine.md#the-claim`).
    let claimed_after_ms = attempt
        .statement_sent
        .filter(|_| matches!(attempt.response, ClaimResponse::Won { .. }))
        .map(|sent| millis(sent.saturating_duration_since(received)));
    let response = attempt.response;
    state.metrics.claim_answered(&response);
    evidence::claim_answered(&scope, &request, &response);
    Ok(ClaimAnswer {
        record_expires_in_ms: record_expires_in_ms
            .filter(|_| matches!(response, ClaimResponse::Completed { .. })),
        claimed_after_ms,
        response,
    })
}

/// Refuses a claim that would add a record for a workload at its storage quota
/// (`docs/records.md#storage-quota`). A record that exists is answered as ever (a retry of a
/// request that ran still gets its answer), so the store is asked only past the quota.
async fn within_quota(state: &AppState, record: &RecordScope) -> Result<(), ApiError> {
    let workload = record.workload().map(|id| &**id);
    let Err(exceeded) = state.quota.check(workload) else {
        return Ok(());
    };
    match state.store.get(&record.scope).await {
        Ok(_) => Ok(()),
        Err(StoreError::NotFound) => {
            state.quota.refused(workload);
            Err(exceeded.into())
        }
        Err(other) => Err(other.into()),
    }
}

/// The caller's wait, in milliseconds, no longer than the configured cap.
fn clamp_wait(wait_ms: Option<u64>, max_wait: Duration) -> u64 {
    wait_ms.unwrap_or(0).min(millis(max_wait))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_capped_and_default_to_none() {
        let cap = Duration::from_secs(30);
        assert_eq!(clamp_wait(None, cap), 0);
        assert_eq!(clamp_wait(Some(500), cap), 500);
        assert_eq!(clamp_wait(Some(u64::MAX), cap), 30_000);
    }
}
