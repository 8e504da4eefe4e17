//! The operation as an axum extractor (feature `axum`), for handlers that take it as an
//! argument instead of reading the headers themselves.
//!
//! `Option<Operation>` is what a handler that also serves unguarded requests takes: `None`
//! when the request carries neither header. `Operation` alone refuses such a request, for a
//! route that must only be reached through keyflight. Either refuses headers that name no
//! operation (one without the other, a malformed value) with 400, as
//! [`Operation::from_headers`] does: those did not come from keyflight as sent
//! (`docs/effects.md#what-the-filter-forwards`).

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;

use crate::operation::{FENCE_HEADER, InvalidOperation, Operation, SCOPE_HEADER};

/// Why a request names no operation the handler can record under.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperationRejection {
    /// The request carries neither header: keyflight did not guard it.
    #[error(
        "neither {SCOPE_HEADER} nor {FENCE_HEADER}: the request did not come through keyflight"
    )]
    Missing,
    /// The headers are there but name no operation.
    #[error(transparent)]
    Invalid(#[from] InvalidOperation),
}

/// 400 with the reason as text: the caller (or a proxy between) sent what keyflight never
/// sends, and running the handler without its operation would give up exactly-once.
impl IntoResponse for OperationRejection {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, self.to_string()).into_response()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Operation {
    type Rejection = OperationRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Operation::from_headers(&parts.headers)?.ok_or(OperationRejection::Missing)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for Operation {
    type Rejection = OperationRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(Operation::from_headers(&parts.headers)?)
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::post;
    use http::Request;
    use tower::ServiceExt as _;

    use super::*;

    const SCOPE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// Answers what the extractors gave the handler.
    fn app() -> Router {
        Router::new()
            .route(
                "/required",
                post(|operation: Operation| async move { operation.fence().to_string() }),
            )
            .route(
                "/optional",
                post(|operation: Option<Operation>| async move {
                    operation.map_or("unguarded".to_owned(), |o| o.fence().to_string())
                }),
            )
    }

    async fn send(path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
        let mut request = Request::post(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = app()
            .oneshot(request.body(Body::empty()).unwrap_or_default())
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_guarded_request_gives_its_operation_to_either_extractor() {
        let both = [(SCOPE_HEADER, SCOPE), (FENCE_HEADER, "7")];
        assert_eq!(send("/required", &both).await, (StatusCode::OK, "7".into()));
        assert_eq!(send("/optional", &both).await, (StatusCode::OK, "7".into()));
    }

    #[tokio::test]
    async fn an_unguarded_request_is_none_or_refused() {
        assert_eq!(
            send("/optional", &[]).await,
            (StatusCode::OK, "unguarded".into())
        );
        let (status, reason) = send("/required", &[]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            reason.contains("did not come through keyflight"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn headers_that_name_no_operation_are_refused_by_both() {
        for path in ["/required", "/optional"] {
            let (status, reason) = send(path, &[(FENCE_HEADER, "7")]).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
            assert!(reason.contains("come together"), "{path}: {reason}");
            let (status, _) = send(path, &[(SCOPE_HEADER, SCOPE), (FENCE_HEADER, "07")]).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        }
    }
}
