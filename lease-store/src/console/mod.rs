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
//! The console authenticates as the admin API does: an operator's named token, as a bearer
//! header or through the session [`session`] opens at sign-in
//! ([`crate::auth::Auth::operator_of`]), which [`throttle`] rate-limits per peer address.

pub mod csrf;
pub mod decision;
pub mod headers;
pub mod pages;
pub mod queue;
pub mod routes;
pub mod session;
pub mod text;
pub mod throttle;

use std::time::Duration;

use axum::middleware;
use axum::routing::{get, post};
use axum::{Extension, Router};

use crate::api::{AppState, limits};
use crate::auth::Auth;
use csrf::CsrfKey;
use session::Sessions;
use throttle::SignInThrottle;

pub use headers::secure;

/// Every console path starts with this.
pub const PREFIX: &str = "/console";

/// The sign-in page, where a browser without a session is sent.
pub const LOGIN: &str = "/console/login";

/// The console's routes: sign-in and sign-out open, the rest behind the operators' tokens
/// (bearer or session); all under the admin API's per-call deadline.
pub fn routes(auth: Auth, request_timeout: Duration) -> Router<AppState> {
    let sessions = Sessions::default();
    let signed_in = Router::new()
        .route(PREFIX, get(routes::queue))
        .route("/console/records/{scope}", get(routes::record))
        .route("/console/records/{scope}/preview", get(routes::preview))
        .route("/console/records/{scope}/decide", post(routes::decide))
        .route("/console/style.css", get(routes::stylesheet))
        .route_layer(Extension(CsrfKey::random()))
        .route_layer(middleware::from_fn_with_state(
            (auth.clone(), sessions.clone()),
            session::require_operator,
        ));
    let sign_in = Router::new()
        .route(LOGIN, get(routes::login_page).post(routes::login))
        .route("/console/logout", post(routes::logout))
        .route_layer(Extension(auth))
        .route_layer(Extension(sessions))
        .route_layer(Extension(SignInThrottle::default()));
    signed_in
        .merge(sign_in)
        .route_layer(middleware::from_fn_with_state(
            request_timeout,
            limits::deadline,
        ))
}
