//! The HTTP API v1 (`docs/records.md#the-api`): routes, shared state and input extractors.
//!
//! One file per call family — [`claims`] (the claim and its long-poll),
//! [`lease`] (renew, finalize, release), [`batch`] (many claims or finalizes in
//! one exchange), [`epoch`] (what edge caches check
//! against), [`records`] (the operator API) and [`health`] (the
//! unauthenticated operability endpoints). This module wires
//! them into one router with the cross-cutting layers: bearer auth per family
//! ([`crate::auth`]), the body size limit, request metrics and tracing.
//!
//! Input is parsed by two extractors that fail with [`ApiError`], so a bad
//! scope in the path, malformed JSON, an unknown field or an oversized body
//! all answer problem+json (never axum's plain-text rejections). Numbers are
//! checked against the ranges the wire types publish ([`within`]) and a
//! response to record (finalize, resolve) against the recorded-header rule
//! ([`recordable`]) before anything reaches the database, so every request
//! the OpenAPI document allows is one the database accepts. An unknown
//! path (404) and a known path called with the wrong method (405, with
//! axum's `Allow` header) answer problem+json too, through the router's two
//! fallbacks.

pub mod answer_rate;
pub mod batch;
pub mod budget;
pub mod claims;
pub mod epoch;
pub mod error;
pub mod health;
pub mod held;
pub mod lease;
pub mod limits;
pub mod reconciled;
pub mod records;

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request};
use axum::http::Method;
use axum::http::request::Parts;
use axum::middleware;
use axum::routing::{get, post};
use keyflight_protocol::Digest;
use keyflight_protocol::headers;
use keyflight_protocol::wire::{
    MAX_REASON_CHARS, PreviousIdentity, RECORDED_STATUS, StoredResponse,
};
use serde::de::DeserializeOwned;
use tower_http::trace::TraceLayer;

use crate::api::budget::{AnswerBudget, BodyBudget};
use crate::api::error::ApiError;
use crate::api::limits::Concurrency;
use crate::auth::{self, Auth};
use crate::caller::Caller;
use crate::longpoll::LongPoll;
use crate::metrics::{self, Metrics};
use crate::quota::Quota;
use crate::settings::{Limits, RecordBounds};
use crate::shares::{Activity, Charged, Shares};
use crate::store::Store;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The Postgres layer.
    pub store: Store,
    /// Wakes long-polling claims (L4).
    pub longpoll: LongPoll,
    /// Counters and histograms (L8).
    pub metrics: Metrics,
    /// Cap on a claim's `wait_ms`.
    pub max_wait: Duration,
    /// What a record may hold.
    pub bounds: RecordBounds,
    /// Workloads also reach the shared namespace (`--namespace-transition`).
    pub namespace_transition: bool,
    /// What each workload may keep (`docs/records.md#storage-quota`).
    pub quota: Arc<Quota>,
    /// The callers' shares of the database pool's connections, which claims and finalizes
    /// wait for (`docs/configuration.md#limits`).
    pub store_places: Arc<Shares>,
}

/// Builds the data-plane router: `/v1/claims…`, `/v1/batch/…` and `/v1/epoch` behind the
/// filter's credentials ([`crate::auth`]) and the per-call limits ([`limits`]), operability
/// endpoints open. A batch never long-polls, so it has the short deadline.
pub fn router(state: AppState, auth: Auth, max_body_bytes: usize, limits: Limits) -> Router {
    let long_poll = Router::new()
        .route("/v1/claims/{scope}", post(claims::claim))
        .route_layer(middleware::from_fn_with_state(
            limits.request_timeout.saturating_add(state.max_wait),
            limits::deadline,
        ));
    let claims = Router::new()
        .route("/v1/claims/{scope}/renew", post(lease::renew))
        .route("/v1/claims/{scope}/finalize", post(lease::finalize))
        .route("/v1/claims/{scope}/release", post(lease::release))
        .route(
            "/v1/claims/{scope}/reconciled",
            post(reconciled::reconciled),
        )
        .route("/v1/batch/claims", post(batch::claims))
        .route("/v1/batch/finalizes", post(batch::finalizes))
        .route("/v1/epoch", get(epoch::epoch))
        .route_layer(middleware::from_fn_with_state(
            limits.request_timeout,
            limits::deadline,
        ))
        .merge(long_poll);
    // Outermost: a call is refused before it takes a slot or budget, and the budget
    // charges the workload it names (`crate::api::budget`).
    let activity = state.longpoll.activity();
    let claims = limited(claims, (&state, activity), max_body_bytes, limits).route_layer(
        middleware::from_fn_with_state((auth, state.metrics.clone()), auth::require_filter),
    );
    let operability = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(health::openapi));
    finish(claims.merge(operability), state, max_body_bytes)
}

/// Builds the admin router, served on its own listener (`docs/records.md#operators`):
/// `/v1/records…` and the operator's console (`/console…`, [`crate::console`]) behind the
/// operators' tokens and the same per-call limits; the console's answers, refusals
/// included, carry its security headers.
pub fn admin_router(state: AppState, auth: Auth, max_body_bytes: usize, limits: Limits) -> Router {
    let console = crate::console::routes(auth.clone(), limits.request_timeout);
    let records = Router::new()
        .route("/v1/records", get(records::list))
        .route(
            "/v1/records/{scope}",
            get(records::show).delete(records::erase),
        )
        .route("/v1/records/{scope}/resolve", post(records::resolve))
        .route_layer(middleware::from_fn_with_state(
            limits.request_timeout,
            limits::deadline,
        ))
        .route_layer(middleware::from_fn_with_state(auth, auth::require_admin))
        .merge(console);
    // Outside everything, fallbacks included: a console path's 404 or 405 carries the
    // console's headers too.
    finish(
        limited(records, (&state, Activity::new()), max_body_bytes, limits),
        state,
        max_body_bytes,
    )
    .layer(middleware::from_fn(crate::console::secure))
}

/// Adds the body and answer budgets and the concurrency cap to `/v1` routes: the slot is
/// taken first, and the answer budget, inside it, holds it with the answer. The cap is
/// shared among the callers `activity` knows (`crate::shares`). A call any of them turns
/// away is answered after a pause, outside them all ([`limits::pace_refusals`]).
fn limited(
    routes: Router<AppState>,
    (state, activity): (&AppState, Arc<Activity>),
    max_body_bytes: usize,
    limits: Limits,
) -> Router<AppState> {
    let budget = BodyBudget::new(
        max_body_bytes,
        limits.max_body_bytes_in_flight,
        limits.max_body_bytes_in_flight_per_caller,
        state.metrics.clone(),
    );
    let answers = AnswerBudget::new(
        (
            limits.max_answer_bytes_in_flight,
            limits.max_answer_bytes_in_flight_per_caller,
        ),
        (limits.max_answer_bytes_per_second, Arc::clone(&activity)),
        state.metrics.clone(),
    );
    routes
        .route_layer(middleware::from_fn_with_state(budget, budget::reserve_body))
        .route_layer(middleware::from_fn_with_state(
            answers,
            budget::reserve_answer,
        ))
        .route_layer(middleware::from_fn_with_state(
            Concurrency::new(
                limits.max_concurrent_requests,
                activity,
                state.metrics.clone(),
            ),
            limits::shed_past_limit,
        ))
        .route_layer(middleware::from_fn(limits::pace_refusals))
}

/// The layers every listener's routes share: problem+json fallbacks, the body
/// size limit, request metrics and tracing.
fn finish(routes: Router<AppState>, state: AppState, max_body_bytes: usize) -> Router {
    let metrics = state.metrics.clone();
    routes
        // After the merges: it applies to the routes that exist when called.
        .method_not_allowed_fallback(wrong_method)
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(metrics, metrics::track))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn no_route() -> ApiError {
    ApiError::NoRoute
}

/// A known path with a method it does not serve. axum adds the `Allow`
/// header to whatever this returns.
async fn wrong_method(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method)
}

/// The `{scope}` path segment, parsed as a wire digest (64 lowercase hex).
#[derive(Debug, Clone, Copy)]
pub struct Scope(pub Digest);

impl<S: Send + Sync> FromRequestParts<S> for Scope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::BadRequest(e.body_text()))?;
        Digest::from_hex(&raw)
            .map(Scope)
            .map_err(|e| ApiError::BadRequest(format!("scope in path: {e}")))
    }
}

/// The record a data-plane call reaches: the `{scope}` path segment in the caller's
/// namespace (`docs/configuration.md#caller-identity`). Without a [`Caller`] (a route
/// outside the filter's auth) nothing is reachable.
#[derive(Debug, Clone)]
pub struct RecordScope {
    /// The record the path names.
    pub scope: Digest,
    /// Whose namespace it is in: every other scope the call names (a dual claim's previous
    /// scope) is read in the same one, through [`RecordScope::also`].
    caller: Caller,
    /// Under `--namespace-transition`, a workload's call also reaches the scope as sent,
    /// in the shared namespace (`docs/configuration.md#switching-to-the-mesh-identity`).
    shared: Option<Digest>,
}

impl RecordScope {
    /// Who made the call, as the audit names a decision it reports: the workload's SPIFFE
    /// id, or `bearer` (the audit's `actor` holds at most 128 characters).
    pub fn reporter(&self) -> String {
        let who = match &self.caller {
            Caller::Workload(id) => id,
            Caller::Bearer => crate::caller::BEARER_LABEL,
        };
        format!("reconciler:{who}").chars().take(128).collect()
    }

    /// The workload a record this call makes is counted to; `None` for a bearer caller.
    pub fn workload(&self) -> Option<&Arc<str>> {
        match &self.caller {
            Caller::Workload(id) => Some(id),
            Caller::Bearer => None,
        }
    }

    /// Whose share of the parked long-polls the call's wait is charged to: its workload,
    /// or one share for every bearer-token caller (`crate::shares`).
    pub fn charged(&self) -> Charged {
        match &self.caller {
            Caller::Workload(id) => Charged::Workload(Arc::clone(id)),
            Caller::Bearer => Charged::Peer(std::net::Ipv4Addr::UNSPECIFIED.into()),
        }
    }

    /// The record of another scope the same call names, in the caller's namespace.
    fn also(&self, scope: &Digest) -> Digest {
        self.caller.record_scope(scope)
    }

    /// The previous identity a claim with `fingerprint` is stored with: the one it names,
    /// in the caller's namespace; or, during a namespace transition, the scope as sent with
    /// the same fingerprint. A claim that names one during a transition is refused: the
    /// two transitions together would be four records, so one finishes first.
    pub fn previous_identity(
        &self,
        named: Option<PreviousIdentity>,
        fingerprint: Digest,
    ) -> Result<Option<PreviousIdentity>, ApiError> {
        match (named, self.shared) {
            (Some(_), Some(_)) => Err(ApiError::BadRequest(
                "this lease-store is moving workloads into their own namespaces \
                 (--namespace-transition): a claim may not name a previous recipe until that \
                 transition is finished"
                    .to_owned(),
            )),
            (Some(named), None) => Ok(Some(PreviousIdentity {
                scope: self.also(&named.scope),
                fingerprint: named.fingerprint,
            })),
            (None, shared) => Ok(shared.map(|scope| PreviousIdentity { scope, fingerprint })),
        }
    }

    /// The second record a settle settles: the previous scope it names, in the caller's
    /// namespace, or, during a namespace transition, the scope as sent. A settle naming a
    /// previous scope comes from a claim that was not a transition's (that one is refused),
    /// so it settles what that claim claimed.
    pub fn previous_scope(&self, named: Option<Digest>) -> Option<Digest> {
        named.map(|scope| self.also(&scope)).or(self.shared)
    }
}

impl FromRequestParts<AppState> for RecordScope {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let namespace = Namespace::from_request_parts(parts, state).await?;
        let Scope(scope) = Scope::from_request_parts(parts, state).await?;
        Ok(namespace.record(scope))
    }
}

/// The authenticated caller's namespace: what turns a scope a call names into the
/// [`RecordScope`] it reaches. The single routes take it with the path's scope; a batch
/// takes it once for all its calls' scopes ([`batch`]), so each call reaches the record its
/// single route would.
#[derive(Debug, Clone)]
pub struct Namespace {
    caller: Caller,
    /// `--namespace-transition`.
    transition: bool,
}

impl Namespace {
    /// The record `scope` names for this caller.
    pub fn record(&self, scope: Digest) -> RecordScope {
        let shared =
            (self.transition && matches!(self.caller, Caller::Workload(_))).then_some(scope);
        RecordScope {
            scope: self.caller.record_scope(&scope),
            caller: self.caller.clone(),
            shared,
        }
    }
}

impl FromRequestParts<AppState> for Namespace {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized)?;
        Ok(Namespace {
            caller,
            transition: state.namespace_transition,
        })
    }
}

/// A JSON body whose rejections are problem+json: 413 over the size limit,
/// 400 naming the offending field otherwise.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(value) = axum::Json::<T>::from_request(request, state).await?;
        Ok(ApiJson(value))
    }
}

/// Refuses a response whose headers break the recorded-header rule (F8):
/// a name that is not an RFC 9110 token or is never stored, a value with a
/// control character. Replaying such a header would split the response or
/// hand one caller's credentials to another. The detail names the header's
/// index and what is wrong, never its value.
pub fn recordable(response: &StoredResponse) -> Result<(), ApiError> {
    if !RECORDED_STATUS.contains(&response.status) {
        return Err(ApiError::BadRequest(format!(
            "response.status must be between {} and {}",
            RECORDED_STATUS.start(),
            RECORDED_STATUS.end()
        )));
    }
    headers::check_all(&response.headers)
        .map_err(|bad| ApiError::BadRequest(format!("response.{bad}")))
}

/// Refuses a response body larger than a record may hold (`--max-record-bytes`).
pub fn fits_a_record(response: &StoredResponse, bounds: &RecordBounds) -> Result<(), ApiError> {
    if response.body.len() > bounds.max_record_bytes {
        return Err(ApiError::RecordTooLarge(bounds.max_record_bytes));
    }
    Ok(())
}

/// Refuses a missing, empty, overlong or control-character reason, or one that starts with
/// white space: it is kept in the audit and logged. (The OpenAPI document says the same as
/// a pattern: `api/records.rs`, `ResolveRequest`.)
pub fn operator_reason(reason: Option<&str>) -> Result<&str, ApiError> {
    let reason = reason.unwrap_or_default();
    if reason.is_empty()
        || reason.starts_with(char::is_whitespace)
        || reason.chars().count() > MAX_REASON_CHARS
        || reason.chars().any(char::is_control)
    {
        return Err(ApiError::BadRequest(format!(
            "reason is required: 1 to {MAX_REASON_CHARS} characters, no control characters, \
             not starting with white space"
        )));
    }
    Ok(reason)
}

/// Refuses a number outside `range`, naming the field: a value the document
/// allows must never overflow the database's timestamp arithmetic.
pub fn within(field: &str, value: u64, range: RangeInclusive<u64>) -> Result<(), ApiError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ApiError::BadRequest(format!(
        "{field} must be between {} and {}",
        range.start(),
        range.end()
    )))
}
