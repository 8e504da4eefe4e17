//! `POST /v1/claims/{scope}/reconciled`: a filter reports what the service's ledger said
//! about an `unknown` record (`docs/reconcile.md#what-the-store-records`).
//!
//! On the data plane, behind the filter's credentials: a workload settles only records in
//! its own namespace ([`RecordScope`]), as it finalizes only its own. The report is applied
//! only while the record is `unknown` at the reported fence and fingerprint; a committed
//! answer must pass the recorded-header rule and fit a record, as a finalize's does.

use axum::extract::State;
use keyflight_protocol::wire::reconcile::ReconciledRequest;

use super::{ApiJson, AppState, RecordScope, fits_a_record, recordable};
use crate::api::error::ApiError;
use crate::evidence;
use crate::metrics::Event;

/// Settles an `unknown` record with the service's answer.
#[utoipa::path(
    post,
    path = "/v1/claims/{scope}/reconciled",
    tag = "claims",
    params(("scope" = String, Path, description = "Scope digest, 64 lowercase hex")),
    request_body = ReconciledRequest,
    responses(
        (status = 200, description = "Settled: `completed` with the service's answer, or `failed` with its cooldown over"),
        (status = 400, description = "`bad_request`: malformed body, or a header that may not be recorded", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such record", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`not_unknown`: the record is not `unknown` at this fence with this fingerprint", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: the response body exceeds --max-record-bytes", body = keyflight_protocol::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn reconciled(
    State(state): State<AppState>,
    record: RecordScope,
    ApiJson(report): ApiJson<ReconciledRequest>,
) -> Result<(), ApiError> {
    if report.fence() < 1 {
        return Err(ApiError::BadRequest("fence must be positive".to_owned()));
    }
    if let ReconciledRequest::Committed { response, .. } = &report {
        recordable(response)?;
        fits_a_record(response, &state.bounds)?;
    }
    let actor = record.reporter();
    state
        .store
        .reconciled(&record.scope, &report, &actor)
        .await?;
    let (event, action) = match report {
        ReconciledRequest::Committed { .. } => (Event::ReconciledCommitted, "reconciled_committed"),
        ReconciledRequest::Absent { .. } => (Event::ReconciledAbsent, "reconciled_absent"),
    };
    state.metrics.event(event);
    evidence::operator_changed(&record.scope, action, &actor);
    tracing::info!(scope = %record.scope.to_hex(), fence = report.fence(), %actor, action, "unknown record settled with the service's answer");
    Ok(())
}
