//! `POST /v1/batch/claims` and `POST /v1/batch/finalizes`: many claims (finalizes) in one
//! HTTP exchange (`docs/records.md#batches`).
//!
//! An edge worker sends the calls its streams make at the same moment as one batch. Its
//! calls run concurrently, so they reach the store's group-commit queues together and share
//! statements and commits (`docs/group-commit.md`): one exchange, and few commits, for many
//! calls.
//!
//! A batch changes only the transport. Each call goes through its single route's own
//! function ([`answer_claim`], [`answer_finalize`]) on the record its single route's path
//! would name ([`Namespace::record`]), and its answer carries that route's status and JSON
//! body. Only two things are the batch's own: a batch of no calls or of more than
//! [`MAX_BATCH_CALLS`] is refused whole, before any call runs; and a claim that asks to
//! wait is refused, because its long-poll would hold back every other call's answer.
//!
//! A replay is weighed against the caller's answer budget as soon as it is read
//! ([`AnswerAccount`]): one past the caller's share is answered 503 there, its body never
//! copied into the batch's answer (`docs/configuration.md#limits`).

use axum::extract::State;
use axum::{Extension, Json};
use futures_util::future::join_all;
use keyflight_protocol::wire::batch::{
    BatchAnswer, BatchedAnswer, ClaimBatch, FinalizeBatch, MAX_BATCH_CALLS, OwnedBatchAnswer,
};
use keyflight_protocol::wire::{ClaimAnswer, ClaimRequest, ClaimResponse, StoredResponse};
use serde::Serialize;
use serde_json::value::{RawValue, to_raw_value};

use super::budget::AnswerAccount;
use super::claims::{answer_claim, charged};
use super::lease::answer_finalize;
use super::limits::Slot;
use super::{ApiJson, AppState, Namespace};
use crate::api::error::ApiError;
use crate::metrics::Metrics;

/// Answers each claim of the batch as `POST /v1/claims/{scope}` would, in order.
#[utoipa::path(
    post,
    path = "/v1/batch/claims",
    tag = "claims",
    request_body = ClaimBatch,
    responses(
        (status = 200, description = "One answer per claim, in order: the status and body `POST /v1/claims/{scope}` answers (a claim with `wait_ms` > 0 is answered 400: a batch never waits)", body = crate::openapi::ClaimBatchAnswer),
        (status = 400, description = "`bad_request`: malformed body, unknown field, or no calls or more than 64; no call ran", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn claims(
    State(state): State<AppState>,
    namespace: Namespace,
    slot: Option<Extension<Slot>>,
    account: Option<Extension<AnswerAccount>>,
    ApiJson(batch): ApiJson<ClaimBatch>,
) -> Result<Json<OwnedBatchAnswer>, ApiError> {
    sized(batch.calls.len())?;
    let state = &state;
    let slot = slot.map(|Extension(slot)| slot);
    let account = account.map(|Extension(account)| account);
    let answers = join_all(batch.calls.into_iter().map(|call| {
        let record = namespace.record(call.scope);
        let caller = charged(slot.as_ref(), &record);
        let account = account.as_ref();
        async move {
            let answer = async {
                never_waits(&call.request)?;
                answer_claim(state, record, call.request, (None, caller, account)).await
            }
            .await;
            weighed(&state.metrics, answer, account)
        }
    }))
    .await;
    Ok(Json(BatchAnswer { answers }))
}

/// Answers each finalize of the batch as `POST /v1/claims/{scope}/finalize` would, in order.
#[utoipa::path(
    post,
    path = "/v1/batch/finalizes",
    tag = "claims",
    request_body = FinalizeBatch,
    responses(
        (status = 200, description = "One answer per finalize, in order: the status and body `POST /v1/claims/{scope}/finalize` answers (`null` for its 200)", body = crate::openapi::FinalizeBatchAnswer),
        (status = 400, description = "`bad_request`: malformed body, unknown field, or no calls or more than 64; no call ran", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the whole batch exceeds --max-body-bytes", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn finalizes(
    State(state): State<AppState>,
    namespace: Namespace,
    slot: Option<Extension<Slot>>,
    ApiJson(batch): ApiJson<FinalizeBatch>,
) -> Result<Json<OwnedBatchAnswer>, ApiError> {
    sized(batch.calls.len())?;
    let state = &state;
    let slot = slot.map(|Extension(slot)| slot);
    let answers = join_all(batch.calls.into_iter().map(|call| {
        let record = namespace.record(call.scope);
        let caller = charged(slot.as_ref(), &record);
        answer_finalize(state, record, call.request, caller)
    }))
    .await;
    Ok(Json(carried(&state.metrics, answers)))
}

/// Refuses a batch of no calls or of more than [`MAX_BATCH_CALLS`], before any call runs.
fn sized(calls: usize) -> Result<(), ApiError> {
    if (1..=MAX_BATCH_CALLS).contains(&calls) {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "a batch carries 1 to {MAX_BATCH_CALLS} calls, not {calls}"
    )))
}

/// Refuses a claim that asks to wait: its long-poll would hold back the answers of every
/// other call in the batch. The edge sends such a claim alone.
fn never_waits(request: &ClaimRequest) -> Result<(), ApiError> {
    match request.wait_ms {
        Some(wait_ms) if wait_ms > 0 => Err(ApiError::BadRequest(format!(
            "wait_ms is {wait_ms}, but a batch never waits: send a claim that waits alone, \
             to POST /v1/claims/{{scope}}"
        ))),
        _ => Ok(()),
    }
}

/// A claim's answer as the batch carries it, written at once so a replayed body is not
/// held twice; a replay is first weighed against the caller's answer budget, by its size
/// once encoded and before it is, and answered 503 when it does not fit. Other answers are
/// small and weighed with the whole batch: a claim won is never shed here, as nobody would
/// then hold its lease.
fn weighed(
    metrics: &Metrics,
    answer: Result<ClaimAnswer, ApiError>,
    account: Option<&AnswerAccount>,
) -> BatchedAnswer<Box<RawValue>> {
    let replayed = match &answer {
        Ok(ClaimAnswer {
            response: ClaimResponse::Completed { response },
            ..
        }) => Some(encoded_size(response)),
        _ => None,
    };
    if let (Some(account), Some(bytes)) = (account, replayed)
        && let Err(spent) = account.weigh(bytes)
    {
        return carried_one::<ClaimAnswer>(metrics, Err(spent));
    }
    carried_one(metrics, answer)
}

/// About what a replay adds to the batch's answer: its body in base64 and its headers (the
/// finished answer is weighed exactly).
fn encoded_size(response: &StoredResponse) -> usize {
    let headers: usize = response
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum();
    response.body.len().div_ceil(3) * 4 + headers
}

/// The batch's answer: each call's as its single route writes it.
fn carried<T: Serialize>(metrics: &Metrics, answers: Vec<Result<T, ApiError>>) -> OwnedBatchAnswer {
    BatchAnswer {
        answers: answers
            .into_iter()
            .map(|answer| carried_one(metrics, answer))
            .collect(),
    }
}

/// One call's answer: 200 and its body (`()` is `null`: a finalize's 200 has none), or the
/// problem its single route answers. That route's problem is counted by the metrics
/// middleware from its response; a batched one is counted here, so
/// `keyflight_store_errors_total` reads the same whether the edge batches or not.
fn carried_one<T: Serialize>(
    metrics: &Metrics,
    answer: Result<T, ApiError>,
) -> BatchedAnswer<Box<RawValue>> {
    let (status, body) = match answer {
        Ok(body) => (200, to_raw_value(&body)),
        Err(error) => {
            let problem = error.into_problem();
            metrics.error(problem.code);
            (problem.status, to_raw_value(&problem))
        }
    };
    match body {
        Ok(body) => BatchedAnswer { status, body },
        // The wire types always serialize (no map with non-string keys, no serializer of
        // their own that fails); were one not to, the call must not read as answered.
        Err(failed) => {
            tracing::error!(%failed, "a batched answer could not be written as JSON");
            BatchedAnswer {
                status: 500,
                body: RawValue::NULL.to_owned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use keyflight_protocol::Digest;

    use super::*;

    fn claim_waiting(wait_ms: Option<u64>) -> ClaimRequest {
        serde_json::from_value(serde_json::json!({
            "fingerprint": Digest::of(b"fp").to_hex(),
            "lease_ms": 1000,
            "wait_ms": wait_ms,
        }))
        .expect("a valid claim")
    }

    #[test]
    fn a_batch_carries_one_to_the_most_calls() {
        assert!(sized(0).is_err());
        assert!(sized(1).is_ok());
        assert!(sized(MAX_BATCH_CALLS).is_ok());
        assert!(sized(MAX_BATCH_CALLS + 1).is_err());
    }

    #[test]
    fn only_a_claim_that_asks_to_wait_is_refused() {
        assert!(never_waits(&claim_waiting(None)).is_ok());
        assert!(never_waits(&claim_waiting(Some(0))).is_ok());
        assert!(never_waits(&claim_waiting(Some(1))).is_err());
    }
}
