//! L7: no body, header value, raw key, principal or token in the logs, at any level.
//!
//! Runs the real `lease-store serve` with `RUST_LOG=trace` (text and JSON
//! lines), drives a whole claim → finalize → replay → operator read cycle
//! whose every secret is a distinctive string, plus malformed calls whose
//! parse errors quote the input, and searches everything the process printed.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::support::*;
use base64::Engine as _;
use keyflight_testkit::process::{ChildGuard, free_port};
use reqwest::Method;
use serde_json::json;

const BODY: &[u8] = br#"{"card":"4111-body-secret-7c1f","cvv":"931"}"#;
const HEADER_VALUE: &str = "header-value-secret-9d2e";
const RAW_KEY: &str = "raw-key-secret-53aa";
const PRINCIPAL: &str = "principal-secret-e01b";
const QUOTED_INPUT: &str = "quoted-input-secret-66f0";

/// Starts `serve` with `RUST_LOG=trace` and the given log format.
async fn trace_server(format: &str) -> (ChildGuard, Api, Api) {
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &[]);
    command
        .env("RUST_LOG", "trace")
        .env("KEYFLIGHT_LOG_FORMAT", format);
    let Server { child, api, admin } = start_command(command, port).await;
    (child, api, admin)
}

/// A claim, carrying the raw key and principal as request headers (as a
/// careless caller might), a long-poll follower, a finalize, a replay, an
/// operator read and malformed calls.
async fn drive_a_cycle(api: &Api, admin: &Api) {
    let body_b64 = base64::engine::general_purpose::STANDARD.encode(BODY);
    let scope = fresh_digest("logs");
    let fingerprint = fresh_digest("logs-fp");
    let claim = api
        .send(
            Method::POST,
            &format!("/v1/claims/{scope}"),
            Some(TOKEN),
            |r| {
                r.header("idempotency-key", RAW_KEY)
                    .header("x-user", PRINCIPAL)
                    .json(&json!({ "fingerprint": fingerprint, "lease_ms": 60_000 }))
            },
        )
        .await;
    assert_eq!(claim.outcome(), "won", "{}", claim.text);
    let claim_id = claim.json["claim_id"].as_str().unwrap().to_owned();

    let follower = {
        let api = api.clone();
        let (scope, fingerprint) = (scope.clone(), fingerprint.clone());
        tokio::spawn(async move { api.claim(&scope, &fingerprint, 10_000).await })
    };
    api.wait_counter("keyflight_store_events_total{event=\"follower_wait\"}", 1)
        .await;

    let response = json!({
        "status": 201,
        "headers": [["content-type", "application/json"], ["etag", HEADER_VALUE]],
        "body_b64": body_b64,
    });
    api.finalize_with(&scope, &claim_id, &response).await;
    let followed = follower.await.unwrap();
    assert_eq!(followed.outcome(), "completed", "{}", followed.text);
    assert_eq!(followed.json["response"]["body_b64"], body_b64.as_str());

    let replay = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.json["response"]["body_b64"], body_b64.as_str());
    let shown = admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(shown.json["response"]["body_b64"], body_b64.as_str());
    // The console's sign-in form carries the operator token in its body (the redirect to
    // the queue is followed without a cookie jar, so it ends on the sign-in page again).
    let signed_in = admin
        .send(Method::POST, "/console/login", None, |r| {
            r.header("content-type", "application/x-www-form-urlencoded")
                .body(format!("token={ADMIN}"))
        })
        .await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.text);
    assert!(
        signed_in.text.contains("<h1>Sign in</h1>"),
        "{}",
        signed_in.text
    );

    // Parse errors quote what they could not parse: the caller sees it in the
    // 400's detail (it sent it), the log must not.
    let other = api.win("logs-bad").await;
    let bad = api
        .post(
            &format!("/v1/claims/{}/finalize", other.0),
            Some(TOKEN),
            &json!({ "claim_id": other.2, "response": { "status": QUOTED_INPUT, "headers": [], "body_b64": "" }, "replayable": true }),
        )
        .await;
    bad.assert_problem(400, "bad_request");
    let bad = api
        .post(
            &format!("/v1/claims/{}/release", other.0),
            Some(TOKEN),
            &json!({ "claim_id": other.2, "as": QUOTED_INPUT }),
        )
        .await;
    bad.assert_problem(400, "bad_request");
    assert!(
        bad.text.contains(QUOTED_INPUT),
        "the premise: serde quotes the input ({})",
        bad.text
    );
    // A wrong token is refused; the token it carried must not be logged either.
    let refused = admin
        .get(
            &format!("/v1/records/{scope}"),
            Some("wrong-token-secret-0c3d"),
        )
        .await;
    refused.assert_problem(401, "unauthorized");
}

/// Every string a log must never hold.
fn secrets() -> Vec<String> {
    let body_b64 = base64::engine::general_purpose::STANDARD.encode(BODY);
    let body_text = String::from_utf8(BODY.to_vec()).unwrap();
    // tokio-postgres would print a bytea parameter as a list of numbers.
    let body_bytes = format!("{:?}", &BODY[..12]);
    vec![
        "4111-body-secret-7c1f".to_owned(),
        body_text,
        body_b64.clone(),
        body_b64[..24].to_owned(),
        body_bytes.trim_end_matches(']').to_owned(),
        hex_of(BODY),
        HEADER_VALUE.to_owned(),
        RAW_KEY.to_owned(),
        PRINCIPAL.to_owned(),
        QUOTED_INPUT.to_owned(),
        TOKEN.to_owned(),
        ADMIN.to_owned(),
        "wrong-token-secret-0c3d".to_owned(),
    ]
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn trace_logs_hold_no_body_header_key_principal_or_token() {
    for format in ["text", "json"] {
        let (mut child, api, admin) = trace_server(format).await;
        drive_a_cycle(&api, &admin).await;
        child.signal(keyflight_testkit::process::Signal::Term);
        child.wait_exit(Duration::from_secs(30));
        let log = child.log();
        // The premise: RUST_LOG reached past INFO (the DEBUG request log is there).
        assert!(
            log.contains("finished processing request"),
            "{format}: no DEBUG request line; log at {}",
            child.log_path().display()
        );
        for secret in secrets() {
            assert!(
                !log.contains(&secret),
                "{format}: the log holds `{secret}`; log at {}",
                child.log_path().display()
            );
        }
    }
}
