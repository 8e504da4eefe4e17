//! L7: bearer tokens for `/v1`.
//!
//! Two roles: the edge filter's token opens `/v1/claims…` and `/v1/epoch` on the
//! data-plane listener, an operator's named token ([`crate::admin_tokens`]) opens
//! `/v1/records…` on the admin listener, and the operator's name rides along with
//! the request ([`Operator`]) into the audit. Each token opens only its own family —
//! the admin token cannot claim, so an operator's credential never doubles as
//! a data-path credential and each can be rotated on its own. A token the
//! store knows but that belongs to the other family gets 403 `forbidden`;
//! anything else gets 401 `unauthorized` with `WWW-Authenticate: Bearer`.
//!
//! Tokens are compared in constant time (`subtle`) so a timing side channel
//! does not reveal how much of a guess was right. Tokens are never logged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::config::{Secret, Tokens};

/// Which token an endpoint family requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The edge filter: `/v1/claims…`, `/v1/epoch`.
    Filter,
    /// An operator: `/v1/records…`.
    Admin,
}

/// The configured tokens, shared by the auth middleware.
#[derive(Debug, Clone)]
pub struct Auth(Arc<Tokens>);

impl Auth {
    /// Wraps the validated tokens.
    pub fn new(tokens: Tokens) -> Self {
        Auth(Arc::new(tokens))
    }

    /// Decides whether the request's bearer token may act as `required`; for an
    /// operator, says which one.
    pub fn check(&self, headers: &HeaderMap, required: Role) -> Result<Option<Operator>, ApiError> {
        let presented = bearer_token(headers).ok_or(ApiError::Unauthorized)?;
        let is_filter = matches(presented, &self.0.filter);
        let operator = self.0.admin.who(presented);
        match (required, is_filter, operator) {
            (Role::Filter, true, _) => Ok(None),
            (Role::Admin, _, Some(name)) => Ok(Some(Operator(name))),
            (Role::Filter, false, Some(_)) => Err(ApiError::Forbidden(
                "the admin token cannot call the claim API; use the filter token",
            )),
            (Role::Admin, true, None) => Err(ApiError::Forbidden(
                "the records API needs the admin token, not the filter token",
            )),
            (_, false, None) => Err(ApiError::Unauthorized),
        }
    }
}

/// Middleware for `/v1/claims…`.
pub async fn require_filter(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    guard(&auth, Role::Filter, request, next).await
}

/// Middleware for `/v1/records…`.
pub async fn require_admin(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    guard(&auth, Role::Admin, request, next).await
}

async fn guard(auth: &Auth, role: Role, mut request: Request, next: Next) -> Response {
    match auth.check(request.headers(), role) {
        Ok(operator) => {
            if let Some(operator) = operator {
                request.extensions_mut().insert(operator);
            }
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

/// The operator an admin call was authenticated as: the name of their token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(pub String);

/// The token of an `authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer_token(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !token.is_empty()).then_some(token)
}

fn matches(presented: &[u8], expected: &Secret) -> bool {
    presented.ct_eq(expected.expose().as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::admin_tokens::AdminTokens;

    fn auth() -> Auth {
        Auth::new(Tokens {
            filter: Secret::new("filter-token"),
            admin: Arc::new(
                AdminTokens::load(Some(Secret::new("admin-token")), None).expect("no file"),
            ),
        })
    }

    fn with_auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("valid header"),
        );
        headers
    }

    #[test]
    fn each_token_opens_only_its_family() {
        let auth = auth();
        assert!(
            auth.check(&with_auth("Bearer filter-token"), Role::Filter)
                .is_ok()
        );
        assert_eq!(
            auth.check(&with_auth("bearer admin-token"), Role::Admin)
                .ok()
                .flatten(),
            Some(Operator("admin".into()))
        );
        assert!(matches!(
            auth.check(&with_auth("Bearer filter-token"), Role::Admin),
            Err(ApiError::Forbidden(_))
        ));
        assert!(matches!(
            auth.check(&with_auth("Bearer admin-token"), Role::Filter),
            Err(ApiError::Forbidden(_))
        ));
    }

    #[test]
    fn missing_malformed_or_wrong_tokens_are_unauthorized() {
        let auth = auth();
        for headers in [
            HeaderMap::new(),
            with_auth("Bearer"),
            with_auth("Bearer "),
            with_auth("Basic filter-token"),
            with_auth("Bearer filter-token2"),
            with_auth("Bearer filter-toke"),
        ] {
            assert!(matches!(
                auth.check(&headers, Role::Filter),
                Err(ApiError::Unauthorized)
            ));
        }
    }

    #[test]
    fn without_an_admin_token_the_admin_api_is_closed() {
        let auth = Auth::new(Tokens {
            filter: Secret::new("filter-token"),
            admin: Arc::new(AdminTokens::load(None, None).expect("no file")),
        });
        assert!(
            auth.check(&with_auth("Bearer filter-token"), Role::Admin)
                .is_err()
        );
        assert!(matches!(
            auth.check(&with_auth("Bearer "), Role::Admin),
            Err(ApiError::Unauthorized)
        ));
    }
}
