//! The console's sign-in session (`docs/console.md#signing-in`).
//!
//! A browser sends no bearer token by itself, so `POST /console/login` takes an operator's
//! token once and answers with a cookie naming a session: a random id this replica keeps in
//! memory with the token it was opened with. Every request re-checks that token as the
//! admin API checks a bearer header ([`Auth::operator_of`]), so a token taken out of the
//! tokens file ends its sessions at once. A session ends at sign-out or after [`LIFETIME`],
//! and neither survives a restart nor reaches another replica: sign in again.
//!
//! The cookie is `HttpOnly` (no script reads it; the console runs none anyway),
//! `SameSite=Strict` (no other site's page makes the browser send it: the sign-in form needs
//! no CSRF token, the decision forms keep theirs) and `Path=/console`, so `/v1/…` never sees
//! it and stays bearer-only. It is not `Secure`: the admin listener serves plain HTTP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::{Auth, Operator};
use crate::settings::Secret;

/// The session cookie's name.
pub const COOKIE: &str = "keyflight_console";

/// How long a session lasts after sign-in, whatever is done with it.
pub const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);

/// Sessions kept at most: signing in past it ends the one closest to its end. Only a valid
/// operator token opens one, so this bounds a careless script, not an attacker.
const MAX_SESSIONS: usize = 1024;

/// The attributes every session cookie carries.
const ATTRIBUTES: &str = "HttpOnly; SameSite=Strict; Path=/console";

/// This replica's open sessions.
#[derive(Clone, Default)]
pub struct Sessions(Arc<Mutex<HashMap<String, Session>>>);

/// What a session holds: the token it was opened with, and its end.
struct Session {
    token: Secret,
    ends: Instant,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions(…)")
    }
}

impl Sessions {
    /// Opens a session for `token` (already checked) at `now`; returns its id, 64 hex.
    pub fn open(&self, token: Secret, now: Instant) -> String {
        let id = hex::encode(rand::random::<[u8; 32]>());
        let mut sessions = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|_, session| session.ends > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(soonest) = sessions
                .iter()
                .min_by_key(|(_, session)| session.ends)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&soonest);
        }
        sessions.insert(
            id.clone(),
            Session {
                token,
                ends: now + LIFETIME,
            },
        );
        id
    }

    /// The token of session `id`, if it is open at `now`.
    pub fn token(&self, id: &str, now: Instant) -> Option<Secret> {
        let sessions = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        sessions
            .get(id)
            .filter(|session| session.ends > now)
            .map(|session| session.token.clone())
    }

    /// Ends session `id`.
    pub fn close(&self, id: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
}

/// The `Set-Cookie` value of session `id`.
pub fn cookie(id: &str) -> String {
    format!(
        "{COOKIE}={id}; {ATTRIBUTES}; Max-Age={}",
        LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that makes a browser drop the session cookie.
pub fn cleared() -> String {
    format!("{COOKIE}=; {ATTRIBUTES}; Max-Age=0")
}

/// The session id a request's `Cookie` headers carry, if any.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

/// Middleware for the console's pages: the operator of the bearer header when there is one
/// (refused as the admin API refuses it: a script gets the status), else of the session
/// cookie; a browser without an open session is sent to sign in, its stale cookie dropped.
pub async fn require_operator(
    State((auth, sessions)): State<(Auth, Sessions)>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let operator = match headers.contains_key(header::AUTHORIZATION) {
        true => auth.operator(headers).map_err(IntoResponse::into_response),
        false => {
            let id = presented(headers);
            id.and_then(|id| sessions.token(id, Instant::now()))
                .and_then(|token| auth.operator_of(token.expose().as_bytes()).ok())
                .ok_or_else(|| to_sign_in(id.is_some()))
        }
    };
    match operator {
        Ok(operator) => {
            request.extensions_mut().insert::<Operator>(operator);
            next.run(request).await
        }
        Err(refused) => refused,
    }
}

/// `303` to the sign-in page; `drop_cookie` also makes the browser drop its session cookie.
pub fn to_sign_in(drop_cookie: bool) -> Response {
    let location = [(header::LOCATION, super::LOGIN)];
    match drop_cookie {
        true => (
            StatusCode::SEE_OTHER,
            location,
            [(header::SET_COOKIE, cleared())],
        )
            .into_response(),
        false => (StatusCode::SEE_OTHER, location).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn a_session_ends_at_its_lifetime_or_when_closed() {
        let sessions = Sessions::default();
        let start = Instant::now();
        let id = sessions.open(Secret::new("token"), start);
        assert_eq!(id.len(), 64);
        assert!(sessions.token(&id, start).is_some());
        assert!(sessions.token(&id, start + LIFETIME).is_none());
        assert!(sessions.token("other", start).is_none());
        sessions.close(&id);
        assert!(sessions.token(&id, start).is_none());
    }

    #[test]
    fn signing_in_past_the_cap_ends_the_session_closest_to_its_end() {
        let sessions = Sessions::default();
        let start = Instant::now();
        let first = sessions.open(Secret::new("token"), start);
        for n in 1..=MAX_SESSIONS {
            let at = start + Duration::from_millis(n as u64);
            sessions.open(Secret::new("token"), at);
        }
        assert!(sessions.token(&first, start).is_none());
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; keyflight_console=ab"),
        );
        assert_eq!(presented(&headers), Some("ab"));
        headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("keyflight_console="),
        );
        assert_eq!(presented(&headers), None);
        assert!(cookie("ab").contains("HttpOnly; SameSite=Strict; Path=/console"));
    }
}
