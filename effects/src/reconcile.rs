//! The reconcile endpoint (feature `axum`): where keyflight asks the service what became of
//! a run whose outcome is uncertain, and the service answers from its ledger
//! (`docs/effects.md#reconciliation`). A service mounts it in one line:
//!
//! ```no_run
//! # type BoxError = Box<dyn std::error::Error + Send + Sync>;
//! # #[derive(Clone)]
//! # struct Pool;
//! # impl Pool {
//! #     async fn get(&self) -> Result<tokio_postgres::Client, BoxError> { unimplemented!() }
//! # }
//! # fn mount(router: axum::Router, pool: Pool, token: String) -> axum::Router {
//! use keyflight_effects::reconcile::{Endpoint, route};
//!
//! let endpoint = Endpoint::new(move |operation| {
//!     let pool = pool.clone(); // a connection pool: deadpool-postgres, bb8, …
//!     async move {
//!         let mut client = pool.get().await?;
//!         Ok::<_, BoxError>(keyflight_effects::reconcile(&mut client, &operation).await?)
//!     }
//! })
//! .token(token);
//! router.merge(route(endpoint))
//! # }
//! ```
//!
//! `POST` on [`DEFAULT_PATH`] (or [`Endpoint::path`]) with the operation's `idempotency-scope`
//! and `idempotency-fence` answers 200 with a [`ServiceAnswer`] echoing both; 401 without the
//! bearer token when one is set, 400 without an operation, 503 when the ledger failed, 500
//! when the committed answer cannot be rendered. keyflight takes anything but 200 as no
//! answer and keeps the record held.
//!
//! The question fences runs out, so only keyflight's proxies may reach it: the filter refuses
//! a caller's request to the path, and in a mesh an authorization policy must admit only the
//! proxies (and the token, where one is set, proves the caller is keyflight).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http::{HeaderMap, StatusCode, header};
use keyflight_protocol::Digest;
use keyflight_protocol::problem::PROBLEM_CONTENT_TYPE;
use keyflight_protocol::wire::StoredResponse;
pub use keyflight_protocol::wire::reconcile::{DEFAULT_PATH, ServiceAnswer};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;

use crate::ledger::Reconciled;
use crate::operation::Operation;

/// The service's question to its ledger, boxed so [`Endpoint`] has one type.
type Ask =
    dyn Fn(Operation) -> Pin<Box<dyn Future<Output = Result<Reconciled, ()>> + Send>> + Send + Sync;

/// Turns a committed answer, as the service stored it, into the response keyflight records.
type Render = dyn Fn(&Value) -> Result<StoredResponse, String> + Send + Sync;

/// The endpoint's settings: how to ask the ledger, the token, the path, the renderer.
pub struct Endpoint {
    ask: Arc<Ask>,
    token: Option<String>,
    path: String,
    render: Arc<Render>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("path", &self.path)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint that asks the ledger with `ask`: normally [`crate::reconcile()`] (or
    /// `keyflight_effects::sqlx::reconcile`) on a connection of the service's, which returns
    /// [`Reconciled::Absent`] only once the floor committed. Its error is answered 503
    /// without its words; log it in `ask`.
    pub fn new<F, Fut, E>(ask: F) -> Self
    where
        F: Fn(Operation) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reconciled, E>> + Send + 'static,
    {
        let ask = Arc::new(ask);
        Endpoint {
            ask: Arc::new(move |operation| {
                let answer = ask(operation);
                Box::pin(async move { answer.await.map_err(|_| ()) })
            }),
            token: None,
            path: DEFAULT_PATH.to_owned(),
            render: Arc::new(status_and_body),
        }
    }

    /// Requires `authorization: Bearer <token>`, compared in constant time. An empty token
    /// admits nobody.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Serves on `path` instead of [`DEFAULT_PATH`] (keyflight's `reconcile.path` must say
    /// the same).
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Renders committed answers with `render` instead of [`status_and_body`]: for a service
    /// that stores its answers in another shape. An `Err` is answered 500 with its text.
    #[must_use]
    pub fn render(
        mut self,
        render: impl Fn(&Value) -> Result<StoredResponse, String> + Send + Sync + 'static,
    ) -> Self {
        self.render = Arc::new(render);
        self
    }
}

/// The endpoint as a router, to merge into the service's.
pub fn route<S: Clone + Send + Sync + 'static>(endpoint: Endpoint) -> Router<S> {
    let path = endpoint.path.clone();
    Router::new()
        .route(&path, post(answer))
        .with_state(Arc::new(endpoint))
}

/// The default renderer: an answer stored as `{"status": <u16>, "body": <json>}` is that
/// status with the body as JSON; anything else is refused.
pub fn status_and_body(answer: &Value) -> Result<StoredResponse, String> {
    let refused = || {
        "a committed answer that is not {\"status\": <100..=599>, \"body\": <json>}: give the \
         endpoint a renderer for this service's answers"
            .to_owned()
    };
    let Some(fields) = answer.as_object() else {
        return Err(refused());
    };
    let status = fields
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=599).contains(s));
    match (status, fields.get("body"), fields.len()) {
        (Some(status), Some(body), 2) => Ok(StoredResponse::new(
            status,
            vec![("content-type".to_owned(), "application/json".to_owned())],
            &serde_json::to_vec(body).map_err(|e| e.to_string())?,
        )),
        _ => Err(refused()),
    }
}

async fn answer(State(endpoint): State<Arc<Endpoint>>, headers: HeaderMap) -> Response {
    if let Some(expected) = &endpoint.token
        && !authorized(expected, &headers)
    {
        return (
            [(header::WWW_AUTHENTICATE, "Bearer")],
            problem(StatusCode::UNAUTHORIZED, "a bearer token is required"),
        )
            .into_response();
    }
    let operation = match Operation::from_headers(&headers) {
        Ok(Some(operation)) => operation,
        Ok(None) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "idempotency-scope and idempotency-fence name the run asked about",
            );
        }
        Err(e) => return problem(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let Ok(reconciled) = (endpoint.ask)(operation.clone()).await else {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "the effect ledger did not answer",
        );
    };
    match service_answer(&operation, reconciled, &*endpoint.render) {
        Ok(answer) => Json(answer).into_response(),
        Err(reason) => problem(StatusCode::INTERNAL_SERVER_ERROR, &reason),
    }
}

/// Whether `headers` carry `authorization: Bearer <expected>` (scheme case-insensitive).
fn authorized(expected: &str, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, presented)) = value.as_bytes().split_at_checked(7) else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"bearer ")
        && !expected.is_empty()
        && bool::from(presented.ct_eq(expected.as_bytes()))
}

/// The wire answer to the question about `operation`, echoing its scope and fence.
fn service_answer(
    operation: &Operation,
    reconciled: Reconciled,
    render: &Render,
) -> Result<ServiceAnswer, String> {
    // An Operation's scope is 64 lowercase hex characters: this cannot fail.
    let scope = Digest::from_hex(operation.scope()).map_err(|e| e.to_string())?;
    let fence = operation.fence();
    Ok(match reconciled {
        Reconciled::Committed { answer, .. } => ServiceAnswer::Committed {
            scope,
            fence,
            response: render(&answer)?,
        },
        Reconciled::Absent => ServiceAnswer::Absent { scope, fence },
    })
}

/// An RFC 9457 problem of `status` saying `detail`.
fn problem(status: StatusCode, detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or_default(),
        "status": status.as_u16(),
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)],
        Json(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt as _;

    use super::*;

    const SCOPE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// An endpoint whose ledger answers `reconciled`, or fails when `None`.
    fn app(reconciled: Option<Reconciled>) -> Router {
        route(
            Endpoint::new(move |_| {
                let reconciled = reconciled.clone();
                async move { reconciled.ok_or("down") }
            })
            .token("s3cret"),
        )
    }

    async fn ask(app: Router, headers: &[(&str, &str)]) -> (StatusCode, Value) {
        let mut request = Request::post(DEFAULT_PATH);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = app
            .oneshot(request.body(Body::empty()).unwrap_or_default())
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap_or_default();
        (status, serde_json::from_slice(&body).unwrap_or_default())
    }

    const OPERATION: [(&str, &str); 2] = [("idempotency-scope", SCOPE), ("idempotency-fence", "7")];

    fn with(auth: &'static str) -> Vec<(&'static str, &'static str)> {
        let mut headers = vec![("authorization", auth)];
        headers.extend(OPERATION);
        headers
    }

    #[tokio::test]
    async fn without_the_token_it_is_401() {
        for headers in [
            OPERATION.to_vec(),
            with("Bearer wrong"),
            with("Bearer s3cre"),
            with("Basic s3cret"),
            with("Bearer "),
        ] {
            let (status, _) = ask(app(Some(Reconciled::Absent)), &headers).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{headers:?}");
        }
    }

    #[tokio::test]
    async fn without_an_operation_it_is_400() {
        for headers in [
            vec![("authorization", "Bearer s3cret")],
            vec![
                ("authorization", "Bearer s3cret"),
                ("idempotency-fence", "7"),
            ],
            vec![
                ("authorization", "Bearer s3cret"),
                ("idempotency-scope", SCOPE),
                ("idempotency-fence", "07"),
            ],
        ] {
            let (status, _) = ask(app(Some(Reconciled::Absent)), &headers).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{headers:?}");
        }
    }

    #[tokio::test]
    async fn absent_echoes_the_question() {
        let (status, body) = ask(app(Some(Reconciled::Absent)), &with("bearer s3cret")).await;
        assert_eq!(status, StatusCode::OK);
        let answer: ServiceAnswer = serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"));
        let ServiceAnswer::Absent { scope, fence } = answer else {
            panic!("{answer:?}")
        };
        assert_eq!((scope.to_hex().as_str(), fence), (SCOPE, 7));
    }

    #[tokio::test]
    async fn committed_carries_the_rendered_answer() {
        let committed = Reconciled::Committed {
            fence: 5,
            answer: json!({"status": 201, "body": {"paid": true}}),
        };
        let (status, body) = ask(app(Some(committed)), &with("Bearer s3cret")).await;
        assert_eq!(status, StatusCode::OK);
        let answer: ServiceAnswer = serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"));
        let ServiceAnswer::Committed {
            scope,
            fence,
            response,
        } = answer
        else {
            panic!("{answer:?}")
        };
        assert_eq!((scope.to_hex().as_str(), fence), (SCOPE, 7));
        assert_eq!(response.status, 201);
        assert_eq!(
            response.headers,
            [("content-type".to_owned(), "application/json".to_owned())]
        );
        assert_eq!(response.body, br#"{"paid":true}"#);
    }

    #[tokio::test]
    async fn a_failed_ledger_is_503_and_an_unrenderable_answer_500() {
        let (status, _) = ask(app(None), &with("Bearer s3cret")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let odd = Reconciled::Committed {
            fence: 5,
            answer: json!({"paid": true}),
        };
        let (status, body) = ask(app(Some(odd)), &with("Bearer s3cret")).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("renderer"),
            "{body}"
        );
    }

    #[test]
    fn the_default_renderer_takes_status_and_body_only() {
        for answer in [
            json!({"status": 99, "body": {}}),
            json!({"status": 600, "body": {}}),
            json!({"status": "201", "body": {}}),
            json!({"status": 201}),
            json!({"status": 201, "body": {}, "headers": []}),
            json!([201, {}]),
        ] {
            assert!(status_and_body(&answer).is_err(), "{answer}");
        }
    }

    #[tokio::test]
    async fn without_a_token_set_it_asks_no_credential_and_serves_its_path() {
        let app = route(Endpoint::new(|_| async { Ok::<_, ()>(Reconciled::Absent) }).path("/r"));
        let response = app
            .oneshot(
                Request::post("/r")
                    .header("idempotency-scope", SCOPE)
                    .header("idempotency-fence", "7")
                    .body(Body::empty())
                    .unwrap_or_default(),
            )
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(response.status(), StatusCode::OK);
    }
}
