//! The console's handlers: the I/O edge, reading the store through the calls the admin
//! API's `list` and `show` make (`crate::api::records`), so a page and the API never
//! disagree about a record (`docs/console.md#what-it-shows`), and deciding through the
//! functions its resolve and erase call, so a decision is the same whoever takes it
//! (`docs/console.md#decisions`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use keyflight_protocol::wire::{RecordState, ResolveRequest};
use maud::Markup;
use serde::Deserialize;

use super::csrf::CsrfKey;
use super::decision::{Decision, DecisionForm};
use super::pages;
use super::queue::{AgeFilter, QueueFilter};
use super::session::{self, Sessions};
use super::throttle::{self, SignInThrottle};
use crate::api::error::ApiError;
use crate::api::records::{DEFAULT_LIMIT, MAX_LIMIT, erase_as_operator, resolve_as_operator};
use crate::api::{AppState, Scope};
use crate::auth::{Auth, Operator};
use crate::settings::Secret;

/// Query of `GET /console`. Each field is text: a form sends an empty box as `name=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueQuery {
    min_age_minutes: Option<String>,
    max_age_minutes: Option<String>,
    workload: Option<String>,
    limit: Option<String>,
}

/// The queue: the newest `unknown` records, as `GET /v1/records?state=unknown` lists them,
/// narrowed by age and workload.
pub async fn queue(
    State(state): State<AppState>,
    Extension(Operator(operator)): Extension<Operator>,
    query: Result<Query<QueueQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let filter = QueueFilter {
        age: AgeFilter {
            min_minutes: number("min_age_minutes", query.min_age_minutes.as_deref())?,
            max_minutes: number("max_age_minutes", query.max_age_minutes.as_deref())?,
        },
        workload: query
            .workload
            .map(|workload| workload.trim().to_owned())
            .filter(|workload| !workload.is_empty()),
    };
    let limit = match number("limit", query.limit.as_deref())? {
        None => DEFAULT_LIMIT,
        Some(limit) => u32::try_from(limit)
            .ok()
            .filter(|limit| (1..=MAX_LIMIT).contains(limit))
            .ok_or_else(|| {
                ApiError::BadRequest(format!("limit must be between 1 and {MAX_LIMIT}"))
            })?,
    };
    let listed = state.store.list(Some(RecordState::Unknown), limit).await?;
    let now_ms = now_ms();
    let view = pages::Queue {
        operator: &operator,
        listed: listed.records.len(),
        limit,
        shown: filter.apply(&listed.records, now_ms),
        measured: state.quota.unknown_records(filter.workload.as_deref()),
        filter: &filter,
        now_ms,
    };
    Ok(html(pages::queue(&view)))
}

/// One record, as `GET /v1/records/{scope}` shows it.
pub async fn record(
    State(state): State<AppState>,
    Extension(Operator(operator)): Extension<Operator>,
    Scope(scope): Scope,
) -> Result<Response, ApiError> {
    let detail = state.store.get(&scope).await?;
    // A router installed before the audit statement existed cannot answer it until
    // `migrate` runs again: the page says so rather than hiding the record.
    let audit = match state.store.audit(&scope).await {
        Ok(rows) => Ok(rows
            .into_iter()
            .map(|row| pages::AuditLine {
                at: row.at,
                actor: row.actor,
                action: row.action,
                reason: row.reason,
                response_sha256: row.response_sha256.map(|digest| digest.to_hex()),
            })
            .collect()),
        Err(error) => {
            tracing::warn!(
                scope = %scope.to_hex(),
                %error,
                "the console could not read a record's audit rows"
            );
            Err(error.to_string())
        }
    };
    Ok(html(pages::record(&operator, &detail, &audit, now_ms())))
}

/// A decision's preview: what a retry gets after it, and the form that takes it, with its
/// CSRF token. Changes nothing.
pub async fn preview(
    State(state): State<AppState>,
    Extension(Operator(operator)): Extension<Operator>,
    Extension(key): Extension<CsrfKey>,
    Scope(scope): Scope,
    form: Result<Query<DecisionForm>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(form) = form?;
    let decision = form.decision().map_err(ApiError::BadRequest)?;
    let detail = state.store.get(&scope).await?;
    let view = pages::Preview {
        operator: &operator,
        detail: &detail,
        form: &form,
        decision: &decision,
        csrf: &key.token(&operator, form.action, &scope),
        now_ms: now_ms(),
    };
    Ok(html(pages::preview(&view)))
}

/// Takes a previewed decision: only with the form's CSRF token, a confirmation and a
/// reason, through the admin API's own resolve or erase.
pub async fn decide(
    State(state): State<AppState>,
    Extension(Operator(operator)): Extension<Operator>,
    Extension(key): Extension<CsrfKey>,
    Scope(scope): Scope,
    form: Result<Form<DecisionForm>, FormRejection>,
) -> Result<Response, ApiError> {
    let Form(form) = form.map_err(|rejected| ApiError::BadRequest(rejected.body_text()))?;
    if !key.admits(&operator, form.action, &scope, form.csrf.as_deref()) {
        return Err(ApiError::Forbidden(
            "the form's CSRF token is missing, or not this operator's for this decision on \
             this record: preview the decision again",
        ));
    }
    if form.confirm.as_deref() != Some("yes") {
        return Err(ApiError::BadRequest(
            "confirm must be `yes`: tick the confirmation".to_owned(),
        ));
    }
    match form.decision().map_err(ApiError::BadRequest)? {
        Decision::Resolve(resolve_as, response) => {
            let request = ResolveRequest {
                resolve_as,
                response,
                reason: form.reason.clone().unwrap_or_default(),
            };
            resolve_as_operator(&state, &scope, &request, &operator).await?;
        }
        Decision::Erase => {
            erase_as_operator(&state, &scope, &operator, form.reason.as_deref()).await?;
        }
    }
    Ok(html(pages::done(&operator, &scope, form.action)))
}

/// The form of `POST /console/login`.
#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
}

/// The sign-in page.
pub async fn login_page() -> Response {
    html(pages::login(None))
}

/// Signs in: an operator's token opens a session and the queue; anything else shows the
/// sign-in page again, with the admin API's status, and sets nothing. An address past its
/// refused sign-ins waits (`429`, [`throttle`]) before its token is looked at. The token is
/// never logged, only the operator's name.
pub async fn login(
    Extension(auth): Extension<Auth>,
    Extension(sessions): Extension<Sessions>,
    Extension(throttle): Extension<SignInThrottle>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let peer = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |Extension(info)| {
        info.0.ip()
    });
    let now = Instant::now();
    if let Err(wait) = throttle.admit(peer, now) {
        let seconds = throttle::retry_after_seconds(wait);
        let refused =
            format!("Too many refused sign-ins from this address: try again in {seconds} s.");
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, seconds.to_string())],
            html(pages::login(Some(&refused))),
        )
            .into_response();
    }
    let token = form.map(|Form(form)| form.token).unwrap_or_default();
    let operator = auth.operator_of(token.as_bytes());
    if operator.is_ok() {
        throttle.succeeded(peer);
    } else if throttle.failed(peer, now) {
        tracing::warn!(
            %peer,
            "console sign-ins from this address wait: {} refused within {} s",
            throttle::MAX_FAILURES,
            throttle::WINDOW.as_secs()
        );
    }
    match operator {
        Ok(Operator(operator)) => {
            let id = sessions.open(Secret::new(token), now);
            tracing::info!(%operator, "an operator signed in to the console");
            (
                StatusCode::SEE_OTHER,
                [
                    (header::LOCATION, super::PREFIX.to_owned()),
                    (header::SET_COOKIE, session::cookie(&id)),
                ],
            )
                .into_response()
        }
        Err(ApiError::Forbidden(_)) => (
            StatusCode::FORBIDDEN,
            html(pages::login(Some(
                "That is the filter token: the console needs an operator's token.",
            ))),
        )
            .into_response(),
        Err(_) => (
            StatusCode::UNAUTHORIZED,
            html(pages::login(Some("That is not an operator's token."))),
        )
            .into_response(),
    }
}

/// Signs out: ends the session the cookie names, drops the cookie, shows the sign-in page.
pub async fn logout(Extension(sessions): Extension<Sessions>, headers: HeaderMap) -> Response {
    if let Some(id) = session::presented(&headers) {
        sessions.close(id);
    }
    session::to_sign_in(true)
}

/// The console's only stylesheet (its Content-Security-Policy allows styles from here alone).
pub async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("style.css"),
    )
        .into_response()
}

/// A page as the answer.
fn html(page: Markup) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page.into_string(),
    )
        .into_response()
}

/// A whole number from a query field; an empty field is none.
fn number(field: &str, value: Option<&str>) -> Result<Option<u64>, ApiError> {
    match value.filter(|value| !value.is_empty()) {
        None => Ok(None),
        Some(value) => value
            .parse()
            .map(Some)
            .map_err(|_| ApiError::BadRequest(format!("{field} must be a whole number"))),
    }
}

/// Now, in Unix milliseconds (0 for a clock before 1970).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}
