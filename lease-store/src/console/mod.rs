//! The operator's console (`docs/console.md`): the records that need a human, as HTML pages
//! on the admin listener, never on the data plane.
//!
//! One job per file: [`routes`] reads the store through the same calls as the admin API's
//! list and show, and decides through the same functions as its resolve and erase;
//! [`queue`] filters what the list returned (pure, time passed in); [`decision`] reads a
//! decision's form and says what a retry gets after it (pure); [`csrf`] makes and checks
//! the token every decision form carries; [`pages`] renders with `maud`, which escapes
//! every value it interpolates; [`text`] makes the characters escaping leaves invisible
//! (bidi controls, line separators) visible; and [`headers`] puts the security headers on
//! every console answer, refusals included.
//! The console authenticates as the admin API does: an operator's named bearer token
//! ([`crate::auth::require_admin`]).

pub mod csrf;
pub mod decision;
pub mod headers;
pub mod pages;
pub mod queue;
pub mod routes;
pub mod text;

use std::time::Duration;

use axum::middleware;
use axum::routing::{get, post};
use axum::{Extension, Router};

use crate::api::{AppState, limits};
use crate::auth::{self, Auth};
use csrf::CsrfKey;

pub use headers::secure;

/// Every console path starts with this.
pub const PREFIX: &str = "/console";

/// The console's routes, behind the operators' tokens and the admin API's per-call deadline.
pub fn routes(auth: Auth, request_timeout: Duration) -> Router<AppState> {
    Router::new()
        .route(PREFIX, get(routes::queue))
        .route("/console/records/{scope}", get(routes::record))
        .route("/console/records/{scope}/preview", get(routes::preview))
        .route("/console/records/{scope}/decide", post(routes::decide))
        .route("/console/style.css", get(routes::stylesheet))
        .route_layer(Extension(CsrfKey::random()))
        .route_layer(middleware::from_fn_with_state(
            request_timeout,
            limits::deadline,
        ))
        .route_layer(middleware::from_fn_with_state(auth, auth::require_admin))
}
