//! L7: who may call `/v1`.
//!
//! Two roles: the edge filter opens `/v1/claims…` and `/v1/epoch` on the data-plane
//! listener, an operator's named token ([`crate::access::admin_tokens`]) opens `/v1/records…` on
//! the admin listener, and the operator's name rides along with the request
//! ([`Operator`]) into the audit. Each credential opens only its own family — the admin
//! token cannot claim, so an operator's credential never doubles as a data-path
//! credential and each can be rotated on its own. A token the store knows but that
//! belongs to the other family gets 403 `forbidden`; anything else gets 401
//! `unauthorized` with `WWW-Authenticate: Bearer`.
//!
//! The filter has up to two credentials, and every one configured must hold: a bearer
//! token of the token set ([`crate::access::token_set`]), and, under `--trust-xfcc`, its mesh
//! identity ([`crate::caller`]), which must be on the allowlist. The call then carries its
//! [`Caller`], which decides the records it reaches, and runs inside a `caller` span naming
//! the workload, so its log lines are attributed; the metrics count calls and refusals per
//! workload, labelled only with allowlisted ids (everything else is `other`).
//!
//! Tokens are compared in constant time (`subtle`) so a timing side channel
//! does not reveal how much of a guess was right. Tokens are never logged.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument as _;

use crate::access::Credentials;
use crate::api::error::ApiError;
use crate::caller::{Caller, Refused};
use crate::log_limit::{self, Kind};
use crate::metrics::Metrics;

/// The header the store's sidecar puts the verified client certificate in.
const XFCC: &str = "x-forwarded-client-cert";

/// Which credential an endpoint family requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The edge filter: `/v1/claims…`, `/v1/epoch`.
    Filter,
    /// An operator: `/v1/records…`.
    Admin,
}

/// The configured credentials, shared by the auth middleware.
#[derive(Debug, Clone)]
pub struct Auth(Arc<Credentials>);

/// A data-plane call turned away: the answer, and the workload label and reason it is
/// counted under.
#[derive(Debug)]
pub struct Refusal {
    /// What the caller is told.
    pub error: ApiError,
    /// The metrics label of the caller (an allowlisted id, `bearer` or `other`).
    pub workload: String,
    /// Why, as a metrics label.
    pub reason: &'static str,
}

impl Auth {
    /// Wraps the validated credentials.
    pub fn new(credentials: Credentials) -> Self {
        Auth(Arc::new(credentials))
    }

    /// The data-plane caller of a call from `peer` with `headers`: every configured
    /// credential must hold.
    pub fn caller(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Result<Caller, Refusal> {
        let caller = match &self.0.mesh {
            Some(mesh) => {
                let xfcc: Vec<&[u8]> = headers
                    .get_all(XFCC)
                    .iter()
                    .map(|value| value.as_bytes())
                    .collect();
                match mesh.identify(peer, &xfcc) {
                    Ok(id) => Caller::Workload(id),
                    Err((refused, id)) => {
                        if refused == Refused::NotAllowed
                            && let Some(suppressed) = log_limit::global().admit(Kind::CallerRefused)
                        {
                            tracing::warn!(workload = ?id, suppressed, "a workload not on the allowlist (--workload, --workloads-file) called the data plane");
                        }
                        return Err(Refusal {
                            error: ApiError::NoMeshIdentity(refused),
                            workload: mesh.label(id),
                            reason: refused.as_str(),
                        });
                    }
                }
            }
            None => Caller::Bearer,
        };
        if let Some(tokens) = &self.0.filter {
            let refused = |error| Refusal {
                error,
                workload: caller.label().to_owned(),
                reason: "token",
            };
            let presented = bearer_token(headers).ok_or_else(|| refused(ApiError::Unauthorized))?;
            if !tokens.contains(presented) {
                return Err(refused(match self.0.admin.who(presented) {
                    Some(_) => ApiError::Forbidden(
                        "the admin token cannot call the claim API; use the filter token",
                    ),
                    None => ApiError::Unauthorized,
                }));
            }
        }
        Ok(caller)
    }

    /// The operator whose named token the request presents.
    pub fn operator(&self, headers: &HeaderMap) -> Result<Operator, ApiError> {
        self.operator_of(bearer_token(headers).ok_or(ApiError::Unauthorized)?)
    }

    /// The operator whose named token `presented` is: the one check behind the bearer
    /// header and the console's sign-in (`docs/console.md#signing-in`).
    pub fn operator_of(&self, presented: &[u8]) -> Result<Operator, ApiError> {
        if let Some(name) = self.0.admin.who(presented) {
            return Ok(Operator(name));
        }
        let is_filter = self
            .0
            .filter
            .as_ref()
            .is_some_and(|tokens| tokens.contains(presented));
        Err(match is_filter {
            true => {
                ApiError::Forbidden("the records API needs the admin token, not the filter token")
            }
            false => ApiError::Unauthorized,
        })
    }
}

/// Middleware for `/v1/claims…` and `/v1/epoch`: puts the [`Caller`] in the request and
/// runs the call in its `caller` span.
pub async fn require_filter(
    State((auth, metrics)): State<(Auth, Metrics)>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    match auth.caller(request.headers(), peer) {
        Ok(caller) => {
            let workload = caller.label().to_owned();
            metrics.caller_call(&workload);
            request.extensions_mut().insert(caller);
            let span = tracing::info_span!("caller", %workload);
            next.run(request).instrument(span).await
        }
        Err(refusal) => {
            metrics.caller_refused(&refusal.workload, refusal.reason);
            refusal.error.into_response()
        }
    }
}

/// Middleware for `/v1/records…`.
pub async fn require_admin(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    match auth.operator(request.headers()) {
        Ok(operator) => {
            request.extensions_mut().insert(operator);
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

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use crate::access::{AdminTokens, Allowlist, MeshIdentity, TokenSet};
    use crate::settings::Secret;

    const CHECKOUT: &str = "spiffe://cluster.local/ns/payments/sa/checkout";

    fn auth_with(filter: Option<&str>, mesh: bool) -> Auth {
        Auth::new(Credentials {
            filter: filter.map(|t| Arc::new(TokenSet::inline(Secret::new(t)))),
            mesh: mesh.then(|| {
                Arc::new(MeshIdentity {
                    trusted_peers: vec!["127.0.0.0/8".parse().expect("a CIDR")],
                    allowed: Allowlist::fixed(vec![CHECKOUT.into()]),
                })
            }),
            admin: Arc::new(
                AdminTokens::load(Some(Secret::new("admin-token")), None).expect("no file"),
            ),
        })
    }

    fn auth() -> Auth {
        auth_with(Some("filter-token"), false)
    }

    fn with_auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("valid header"),
        );
        headers
    }

    fn with_xfcc(headers: &mut HeaderMap, uri: &str) {
        headers.append(
            XFCC,
            HeaderValue::from_str(&format!("Hash=00;URI={uri}")).expect("valid header"),
        );
    }

    const SIDECAR: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 6)));

    #[test]
    fn each_token_opens_only_its_family() {
        let auth = auth();
        assert_eq!(
            auth.caller(&with_auth("Bearer filter-token"), None).ok(),
            Some(Caller::Bearer)
        );
        assert_eq!(
            auth.operator(&with_auth("bearer admin-token")).ok(),
            Some(Operator("admin".into()))
        );
        assert!(matches!(
            auth.operator(&with_auth("Bearer filter-token")),
            Err(ApiError::Forbidden(_))
        ));
        assert!(matches!(
            auth.caller(&with_auth("Bearer admin-token"), None),
            Err(Refusal {
                error: ApiError::Forbidden(_),
                ..
            })
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
                auth.caller(&headers, None),
                Err(Refusal {
                    error: ApiError::Unauthorized,
                    reason: "token",
                    ..
                })
            ));
        }
    }

    #[test]
    fn without_an_admin_token_the_admin_api_is_closed() {
        let auth = Auth::new(Credentials {
            filter: Some(Arc::new(TokenSet::inline(Secret::new("filter-token")))),
            mesh: None,
            admin: Arc::new(AdminTokens::load(None, None).expect("no file")),
        });
        assert!(auth.operator(&with_auth("Bearer filter-token")).is_err());
        assert!(matches!(
            auth.operator(&with_auth("Bearer ")),
            Err(ApiError::Unauthorized)
        ));
    }

    #[test]
    fn under_the_mesh_the_sidecars_identity_names_the_caller() {
        let auth = auth_with(None, true);
        let mut headers = HeaderMap::new();
        with_xfcc(&mut headers, CHECKOUT);
        assert_eq!(
            auth.caller(&headers, SIDECAR).ok(),
            Some(Caller::Workload(CHECKOUT.into()))
        );
        let refused = auth
            .caller(&headers, Some(IpAddr::from([10, 1, 2, 3])))
            .expect_err("XFCC from another hop is not believed");
        assert_eq!(
            (refused.reason, refused.workload.as_str()),
            ("untrusted_peer", "other")
        );
        let mut stranger = HeaderMap::new();
        with_xfcc(&mut stranger, "spiffe://cluster.local/ns/x/sa/y");
        let refused = auth.caller(&stranger, SIDECAR).expect_err("not listed");
        assert_eq!(
            (refused.reason, refused.workload.as_str()),
            ("not_allowed", "other")
        );
        assert!(matches!(
            refused.error,
            ApiError::NoMeshIdentity(Refused::NotAllowed)
        ));
    }

    #[test]
    fn with_both_credentials_configured_both_must_hold() {
        let auth = auth_with(Some("filter-token"), true);
        let mut headers = with_auth("Bearer filter-token");
        assert!(auth.caller(&headers, SIDECAR).is_err(), "no identity");
        with_xfcc(&mut headers, CHECKOUT);
        assert!(auth.caller(&headers, SIDECAR).is_ok());
        let mut no_token = HeaderMap::new();
        with_xfcc(&mut no_token, CHECKOUT);
        let refused = auth.caller(&no_token, SIDECAR).expect_err("no token");
        assert_eq!(
            (refused.reason, refused.workload.as_str()),
            ("token", CHECKOUT)
        );
    }
}
