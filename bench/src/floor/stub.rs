//! The edge floor's lease-store: a stub that answers every claim `won` and every finalize
//! 200 at once, with no database (issue 25's measurement device, now part of `make bench`).
//! A guarded Envoy in front of it measures Envoy, the filter and the upstream with a record
//! store that costs nothing. It runs as its own process (`keyflight-bench stub-store`), so
//! its CPU is charged apart from the load generator's. It gives up every guarantee: it is a
//! floor, never a configuration.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use keyflight_protocol::wire::batch::{BatchAnswer, BatchedAnswer, ClaimBatch, FinalizeBatch};
use keyflight_protocol::wire::{
    ClaimAnswer, ClaimRequest, ClaimResponse, EpochResponse, FinalizeRequest, WonHow,
};
use keyflight_testkit::process::{ChildGuard, free_port, wait_http_ok};
use serde::Serialize;
use serde_json::Value;
use tokio::net::TcpListener;
use uuid::Uuid;

use crate::error::BenchError;

/// What the stub answers a request: its status and JSON body (empty: no body).
pub fn answer(
    method: &str,
    path: &str,
    body: &[u8],
    next_fence: &dyn Fn() -> i64,
) -> (u16, Vec<u8>) {
    let won = |request: &ClaimRequest| ClaimAnswer {
        response: ClaimResponse::Won {
            claim_id: Uuid::new_v4(),
            fence: next_fence(),
            how: WonHow::Claimed,
            lease_ms: request.lease_ms,
        },
        record_expires_in_ms: None,
        claimed_after_ms: Some(0),
    };
    let refused = |e: serde_json::Error| (400, e.to_string().into_bytes());
    match (method, path) {
        ("GET", "/readyz") => (200, Vec::new()),
        ("GET", "/v1/epoch") => ok(&EpochResponse { epoch: 0 }),
        ("POST", "/v1/batch/claims") => match serde_json::from_slice::<ClaimBatch>(body) {
            Ok(batch) => ok(&answers(
                batch.calls.iter().map(|call| json(&won(&call.request))),
            )),
            Err(e) => refused(e),
        },
        ("POST", "/v1/batch/finalizes") => match serde_json::from_slice::<FinalizeBatch>(body) {
            Ok(batch) => ok(&answers(batch.calls.iter().map(|_| Value::Null))),
            Err(e) => refused(e),
        },
        ("POST", path) if claim_route(path) == Some("finalize") => {
            match serde_json::from_slice::<FinalizeRequest>(body) {
                Ok(_) => (200, Vec::new()),
                Err(e) => refused(e),
            }
        }
        ("POST", path) if claim_route(path) == Some("") => {
            match serde_json::from_slice::<ClaimRequest>(body) {
                Ok(request) => ok(&won(&request)),
                Err(e) => refused(e),
            }
        }
        _ => (404, Vec::new()),
    }
}

/// Under `/v1/claims/{scope}`: `Some("")` for the claim itself, `Some("finalize")` for its
/// finalize, and so on.
fn claim_route(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/claims/")?;
    Some(rest.split_once('/').map_or("", |(_, route)| route))
}

/// 200 with `value` as JSON.
fn ok(value: &impl Serialize) -> (u16, Vec<u8>) {
    (200, serde_json::to_vec(value).unwrap_or_default())
}

fn json(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A batch's answer: every call 200 with `bodies` in order.
fn answers(bodies: impl Iterator<Item = Value>) -> BatchAnswer<Value> {
    BatchAnswer {
        answers: bodies
            .map(|body| BatchedAnswer { status: 200, body })
            .collect(),
    }
}

/// How long the stub may take to answer its first `/readyz`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the stub as a process of its own (this program's `stub-store`) on a free port
/// and waits until it answers; returns it and its port.
pub async fn start() -> Result<(ChildGuard, u16), BenchError> {
    let port = free_port();
    let program = std::env::current_exe().map_err(BenchError::io("find keyflight-bench"))?;
    let mut command = std::process::Command::new(program);
    command.args(["stub-store", "--listen", &format!("127.0.0.1:{port}")]);
    let mut child = ChildGuard::spawn("stub-store", command);
    wait_http_ok(
        &format!("http://127.0.0.1:{port}/readyz"),
        READY_TIMEOUT,
        Some(&mut child),
    )
    .await;
    Ok((child, port))
}

/// Serves on `listen` until the process ends.
pub async fn serve(listen: SocketAddr) -> Result<(), BenchError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(BenchError::io(format!("listen on {listen}")))?;
    let fences = Arc::new(AtomicI64::new(1));
    loop {
        let (stream, _) = listener.accept().await.map_err(BenchError::io("accept"))?;
        let _ = stream.set_nodelay(true);
        let fences = Arc::clone(&fences);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let fences = Arc::clone(&fences);
                async move { Ok::<_, Infallible>(respond(request, &fences).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn respond(request: Request<Incoming>, fences: &AtomicI64) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let next_fence = || fences.fetch_add(1, Ordering::Relaxed);
    let (status, body) = answer(parts.method.as_str(), parts.uri.path(), &body, &next_fence);
    let empty = body.is_empty();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if !empty {
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> i64 {
        7
    }

    const SCOPE: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn every_claim_is_won_and_every_finalize_recorded() {
        let claim = format!(r#"{{"fingerprint":"{SCOPE}","lease_ms":30000}}"#);
        let (status, body) = answer(
            "POST",
            &format!("/v1/claims/{SCOPE}"),
            claim.as_bytes(),
            &fence,
        );
        assert_eq!(status, 200);
        let answer_: ClaimAnswer = serde_json::from_slice(&body).expect("a claim answer");
        assert!(matches!(
            answer_.response,
            ClaimResponse::Won {
                fence: 7,
                lease_ms: 30000,
                how: WonHow::Claimed,
                ..
            }
        ));

        let batch = format!(
            r#"{{"calls":[{{"scope":"{SCOPE}","request":{claim}}},{{"scope":"{SCOPE}","request":{claim}}}]}}"#
        );
        let (status, body) = answer("POST", "/v1/batch/claims", batch.as_bytes(), &fence);
        assert_eq!(status, 200);
        let batch: BatchAnswer<ClaimAnswer> = serde_json::from_slice(&body).expect("answers");
        assert_eq!(batch.answers.len(), 2);
        assert!(batch.answers.iter().all(|a| a.status == 200));

        let finalize = format!(
            r#"{{"claim_id":"{}","response":{{"status":201,"headers":[],"body_b64":""}},"replayable":true}}"#,
            Uuid::nil()
        );
        let route = format!("/v1/claims/{SCOPE}/finalize");
        assert_eq!(
            answer("POST", &route, finalize.as_bytes(), &fence),
            (200, Vec::new())
        );
        let batch = format!(r#"{{"calls":[{{"scope":"{SCOPE}","request":{finalize}}}]}}"#);
        let (status, body) = answer("POST", "/v1/batch/finalizes", batch.as_bytes(), &fence);
        assert_eq!(
            (status, body.as_slice()),
            (200, &br#"{"answers":[{"status":200,"body":null}]}"#[..])
        );
    }

    #[test]
    fn the_epoch_is_answered_and_anything_else_refused() {
        assert_eq!(
            answer("GET", "/v1/epoch", b"", &fence),
            (200, br#"{"epoch":0}"#.to_vec())
        );
        assert_eq!(answer("POST", "/v1/claims/x", b"{", &fence).0, 400);
        assert_eq!(
            answer("POST", &format!("/v1/claims/{SCOPE}/renew"), b"{}", &fence).0,
            404
        );
    }
}
