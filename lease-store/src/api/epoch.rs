//! `GET /v1/epoch`: the operator epoch edges check their replay cache against (F9).
//!
//! Behind the filter's token, like the claim calls: every worker of every edge
//! asks for it a few times a second-ish (a third of its `max_staleness_ms`),
//! so it is one primary-key read and nothing else. The epoch grows with every
//! erase or resolve (migration V4); an edge that hears a new one stops serving
//! every entry it cached before.

use axum::Json;
use axum::extract::State;
use keyflight_protocol::wire::EpochResponse;

use super::AppState;
use crate::api::error::ApiError;

/// The store's operator epoch.
#[utoipa::path(
    get,
    path = "/v1/epoch",
    tag = "claims",
    responses(
        (status = 200, description = "The operator epoch: the count of erases and resolves so far", body = EpochResponse),
    ),
    security(("bearer" = []))
)]
pub async fn epoch(State(state): State<AppState>) -> Result<Json<EpochResponse>, ApiError> {
    let epoch = state.store.epoch().await?;
    Ok(Json(EpochResponse { epoch }))
}
