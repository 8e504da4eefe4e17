//! Routes of the demo upstream (described for clients in `demo-upstream/openapi.json`,
//! which `make openapi-overlay` patches with keyflight's contract).
//!
//! | route | what |
//! |---|---|
//! | `POST /payments`, `POST /payments/…` | counts and logs an execution, then answers 201 with a fresh payment |
//! | `GET /stats` | `{"executions": N, "by_path": {...}}` |
//! | `GET /effects` | `{"payments": N, "operations_paid_more_than_once": M}`: the payment rows committed, and the scopes with more than one (404 without `--effects-database-url`) |
//! | `GET /effects/ledger` | `{"payments": [{"scope", "fence"}], "reconciliations": [...]}`: each payment made under an operation, and each reconcile answer given (`reconciliations.rs`; 404 without `--effects-database-url`) |
//! | `POST /.well-known/keyflight/reconcile` | keyflight's reconcile question, answered from the payments ledger (only with `--effects-database-url`; `effects.rs`) |
//! | `GET /executions` | the execution log as JSON lines (`application/x-ndjson`), oldest first; `?after=N` only those after execution `N` (see `executions.rs`) |
//! | `POST /stats/reset` | zeroes the counters and empties the execution log |
//! | `GET /gates/{name}` | `{"waiting": N, "open": bool}` |
//! | `POST /gates/{name}/open` | opens the gate for good |
//! | anything else | 404 JSON |
//!
//! A payment takes six optional query parameters, applied in this order after the
//! execution is counted: `hold=NAME` waits at gate `NAME`, `delay_ms=N` sleeps (the two stand
//! for the call to the payment provider: with `--effects-database-url` they come after the
//! ledger's early check, inside the payment's transaction, which then commits; a re-run the
//! ledger answers skips them: `effects.rs`),
//! `hold_committed=NAME` waits at gate `NAME`, `abort=NAME` closes the connection without
//! an answer (the first execution per `NAME` only, so a retry that runs again succeeds: a
//! service that died right after its side effect, retried onto a healthy one), `status=N`
//! answers that status instead of 201, and
//! `gzip=when_asked` gzips the answer when the request's `accept-encoding` names gzip (a
//! well-behaved server) while `gzip=always` gzips it whatever the request says (one that is
//! not). The answer deliberately carries a `set-cookie` (which keyflight must never
//! replay), the `idempotency-fence` it got and the `accept-encoding` it was asked for.
//!
//! Each execution's log entry (`GET /executions`) holds the idempotency key and fence it
//! saw, the path, a digest of the body, which proxy and caller request it came from, and
//! what it answered (a status, or a reset), so
//! a history checker (`keyflight-chaos`) can tell which operation ran twice and why.

use std::future::Future;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use crate::connection::Connection;
use crate::effects::{Ledger, LedgerError, Paid};
use crate::executions::{Execution, ExecutionLog};
use crate::gates::Gates;
use crate::reconciliations::ReconcileLog;
use crate::stats::Stats;

/// Request bodies up to this size are accepted (well above any filter cap used in tests).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Shared state of all handlers.
#[derive(Debug, Clone, Default)]
pub struct AppState {
    /// Execution counters.
    pub stats: std::sync::Arc<Stats>,
    /// Named gates that hold payment handlers.
    pub gates: Gates,
    /// Every execution, in order.
    pub executions: std::sync::Arc<ExecutionLog>,
    /// The `abort=NAME` names that already aborted once.
    pub aborted: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// The payments database, when payments are kept there (`--effects-database-url`).
    pub ledger: Option<Ledger>,
    /// Every answer to keyflight's reconcile question, in order.
    pub reconciliations: std::sync::Arc<ReconcileLog>,
}

/// Builds the router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/payments", post(pay).fallback(not_found))
        .route("/payments/{*rest}", post(pay).fallback(not_found))
        .route("/stats", get(stats).fallback(not_found))
        .route("/stats/reset", post(reset_stats).fallback(not_found))
        .route("/executions", get(executions).fallback(not_found))
        .route("/effects", get(effects).fallback(not_found))
        .route("/effects/ledger", get(effects_ledger).fallback(not_found))
        .route("/gates/{name}", get(gate_status).fallback(not_found))
        .route("/gates/{name}/open", post(open_gate).fallback(not_found))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Query parameters of a payment.
#[derive(Debug, Default, Deserialize)]
struct PayParams {
    /// Wait at this gate before answering.
    hold: Option<String>,
    /// Sleep this long before answering.
    delay_ms: Option<u64>,
    /// Wait at this gate once the payment committed (with a ledger).
    hold_committed: Option<String>,
    /// Close the connection without an answer, the first time per name.
    abort: Option<String>,
    /// Answer this status instead of 201.
    status: Option<u16>,
    /// When to gzip the answer.
    gzip: Option<Gzip>,
}

/// The `gzip` query parameter of a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Gzip {
    /// Only when the request's `accept-encoding` names gzip.
    WhenAsked,
    /// Always, whatever the request accepts.
    Always,
}

async fn pay(
    State(state): State<AppState>,
    ConnectInfo(connection): ConnectInfo<Connection>,
    uri: Uri,
    Query(params): Query<PayParams>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let status = match params.status.map(StatusCode::from_u16).transpose() {
        Ok(status) => status.unwrap_or(StatusCode::CREATED),
        Err(_) => return error(StatusCode::BAD_REQUEST, "status must be 100..=999"),
    };
    let execution = state.stats.record(uri.path());
    state.executions.push(Execution::of_request(
        execution,
        uri.path(),
        &headers,
        &body,
    ));
    tracing::info!(path = uri.path(), execution, "payment executing");

    // The call to the payment provider, which the ledger's early check spares a re-run.
    let provider = async {
        if let Some(gate) = &params.hold {
            state.gates.pass(gate).await;
        }
        if let Some(delay) = params.delay_ms {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    };

    let payment_id = Uuid::now_v7();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let accept_encoding = text(header::ACCEPT_ENCODING);
    let answer = json!({
        "payment_id": payment_id,
        "execution": execution,
        "request": request,
        "fence": text(header::HeaderName::from_static("idempotency-fence")),
        "accept_encoding": accept_encoding,
    });
    let (status, answer) = match &state.ledger {
        Some(ledger) => match pay_in_ledger(
            ledger,
            (&headers, &body),
            payment_id,
            provider,
            (status, answer),
        )
        .await
        {
            Ok(paid) => paid,
            Err(response) => {
                // The history checker tells a refused payment from a lost answer by this.
                state
                    .executions
                    .answered(execution, response.status().as_u16());
                return response;
            }
        },
        None => {
            provider.await;
            (status, answer)
        }
    };
    if let Some(gate) = &params.hold_committed {
        state.gates.pass(gate).await;
    }
    if let Some(name) = &params.abort
        && first_abort(&state, name)
        && connection.abort()
    {
        tracing::info!(
            path = uri.path(),
            execution,
            "payment executed, connection aborted"
        );
        state.executions.reset(execution);
        // Nobody reads this: the connection is gone.
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }

    let asked_for_gzip = accept_encoding.is_some_and(|a| a.to_ascii_lowercase().contains("gzip"));
    let gzip = match params.gzip {
        Some(Gzip::Always) => true,
        Some(Gzip::WhenAsked) => asked_for_gzip,
        None => false,
    };
    let mut response = (
        status,
        [
            (
                header::LOCATION,
                format!(
                    "/payments/{}",
                    answer["payment_id"].as_str().unwrap_or_default()
                ),
            ),
            (
                header::SET_COOKIE,
                format!("session={}; Path=/; HttpOnly", Uuid::now_v7()),
            ),
            (
                header::HeaderName::from_static("x-upstream-execution"),
                execution.to_string(),
            ),
        ],
        Json(answer.clone()),
    )
        .into_response();
    if gzip {
        match gzipped(answer.to_string().as_bytes()) {
            Ok(body) => {
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_ENCODING,
                    header::HeaderValue::from_static("gzip"),
                );
                headers.remove(header::CONTENT_LENGTH);
                *response.body_mut() = axum::body::Body::from(body);
            }
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &format!("gzip: {e}")),
        }
    }
    state.executions.answered(execution, status.as_u16());
    response
}

/// Commits payment `payment_id` in the ledger, under the operation keyflight forwarded and
/// the request's fingerprint (the digest of its body: what makes it this payment); returns
/// the status and answer to give: this run's, or the first run's when an earlier run of the
/// operation had committed, in which case `provider` was not called (`effects.rs`).
async fn pay_in_ledger(
    ledger: &Ledger,
    (headers, body): (&HeaderMap, &[u8]),
    payment_id: Uuid,
    provider: impl Future<Output = ()>,
    (status, answer): (StatusCode, Value),
) -> Result<(StatusCode, Value), Response> {
    let operation = keyflight_effects::Operation::from_headers(headers)
        .map_err(|e| error(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let fingerprint = format!("sha256:{}", hex::encode(Sha256::digest(body)));
    match ledger
        .pay(
            payment_id,
            operation.as_ref().map(|o| (o, fingerprint.as_str())),
            provider,
            (status.as_u16(), &answer),
        )
        .await
    {
        Ok(Paid::Now) => Ok((status, answer)),
        Ok(Paid::Earlier { status, body }) => {
            tracing::info!(%payment_id, "payment already made: answering the first run's answer");
            let status = StatusCode::from_u16(status).map_err(|_| {
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the recorded status is not an HTTP status",
                )
            })?;
            Ok((status, body))
        }
        // A key reused for another body: keyflight's own 409 problem.
        Err(LedgerError::Record(e @ keyflight_effects::Error::Conflict { .. })) => {
            tracing::info!(%payment_id, "idempotency key reused for another body");
            Err(e.into_response())
        }
        // keyflight reconciled this operation as not committed at this run's fence: the
        // payment rolled back, and a higher fence may be running it (a 503 problem).
        Err(LedgerError::Record(e @ keyflight_effects::Error::Fenced { .. })) => {
            tracing::info!(%payment_id, error = %e, "payment fenced out: nothing paid");
            Err(e.into_response())
        }
        Err(e) => Err(error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
    }
}

/// `bytes`, gzip-compressed.
fn gzipped(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    encoder.finish()
}

/// Whether `name` aborts now: true the first time it is seen.
fn first_abort(state: &AppState, name: &str) -> bool {
    state
        .aborted
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.to_owned())
}

async fn effects(State(state): State<AppState>) -> Response {
    let Some(ledger) = &state.ledger else {
        return error(StatusCode::NOT_FOUND, "payments are not kept in a database");
    };
    match ledger.payments().await {
        Ok((payments, paid_more_than_once)) => Json(json!({
            "payments": payments,
            "operations_paid_more_than_once": paid_more_than_once,
        }))
        .into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

async fn stats(State(state): State<AppState>) -> Response {
    Json(state.stats.snapshot()).into_response()
}

/// Query parameters of `GET /executions`.
#[derive(Debug, Default, Deserialize)]
struct ExecutionsParams {
    /// Only executions numbered above this.
    after: Option<u64>,
}

/// The service's own evidence of what each operation did: every payment made under an
/// operation (scope and fence), and every reconcile answer given (`reconciliations.rs`).
async fn effects_ledger(State(state): State<AppState>) -> Response {
    let Some(ledger) = &state.ledger else {
        return error(StatusCode::NOT_FOUND, "payments are not kept in a database");
    };
    match ledger.payment_rows().await {
        Ok(rows) => Json(json!({
            "payments": rows
                .iter()
                .map(|(scope, fence)| json!({"scope": scope, "fence": fence}))
                .collect::<Vec<_>>(),
            "reconciliations": state.reconciliations.entries(),
        }))
        .into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

async fn executions(
    State(state): State<AppState>,
    Query(params): Query<ExecutionsParams>,
) -> Response {
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        state.executions.json_lines_after(params.after.unwrap_or(0)),
    )
        .into_response()
}

async fn reset_stats(State(state): State<AppState>) -> Response {
    state.stats.reset();
    state.executions.clear();
    state.reconciliations.clear();
    Json(state.stats.snapshot()).into_response()
}

async fn gate_status(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    Json(state.gates.status(&name)).into_response()
}

async fn open_gate(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    state.gates.open(&name);
    Json(state.gates.status(&name)).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("no route for {method} {}", uri.path()),
    )
}

fn error(status: StatusCode, detail: &str) -> Response {
    (status, Json(json!({ "error": detail }))).into_response()
}
