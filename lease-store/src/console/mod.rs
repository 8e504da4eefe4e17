//! The operator's console (`docs/console.md`): the records that need a human, as HTML pages
//! on the admin listener, never on the data plane.
//!
//! One job per file: [`routes`] reads the store through the same calls as the admin API's
//! list and show, [`queue`] filters what the list returned (pure, time passed in),
//! [`pages`] renders with `maud`, which escapes every value it interpolates, [`text`] makes
//! the characters escaping leaves invisible (bidi controls, line separators) visible, and
//! [`headers`] puts the security headers on every console answer, refusals included.
//! The console authenticates as the admin API does: an operator's named bearer token
//! ([`crate::auth::require_admin`]).

pub mod headers;
pub mod pages;
pub mod queue;
pub mod routes;
pub mod text;

use std::time::Duration;

use axum::Router;
use axum::middleware;
use axum::routing::get;

use crate::api::{AppState, limits};
use crate::auth::{self, Auth};

pub use headers::secure;

/// Every console path starts with this.
pub const PREFIX: &str = "/console";

/// The console's routes, behind the operators' tokens and the admin API's per-call deadline.
pub fn routes(auth: Auth, request_timeout: Duration) -> Router<AppState> {
    Router::new()
        .route(PREFIX, get(routes::queue))
        .route("/console/records/{scope}", get(routes::record))
        .route("/console/style.css", get(routes::stylesheet))
        .route_layer(middleware::from_fn_with_state(
            request_timeout,
            limits::deadline,
        ))
        .route_layer(middleware::from_fn_with_state(auth, auth::require_admin))
}
