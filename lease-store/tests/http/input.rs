//! L7 over HTTP: malformed input answers 400 problem+json naming the field;
//! oversized bodies 413; unknown paths 404 and wrong methods 405, all problem+json.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use serde_json::json;

#[tokio::test]
async fn malformed_claims_are_bad_requests_naming_the_field() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let scope = fresh_digest("input");
    let path = format!("/v1/claims/{scope}");
    let fp = fresh_digest("fp");

    let detail = api
        .post_raw(&path, "{\"fingerprint\": ")
        .await
        .assert_problem(400, "bad_request");
    assert!(!detail.is_empty());

    let cases = [
        (
            json!({ "fingerprint": fp, "lease_ms": 1000, "extra": 1 }),
            "extra",
        ),
        (
            json!({ "fingerprint": "ABC", "lease_ms": 1000 }),
            "fingerprint",
        ),
        (
            json!({ "fingerprint": fp.to_uppercase(), "lease_ms": 1000 }),
            "fingerprint",
        ),
        (json!({ "fingerprint": fp, "lease_ms": -1 }), "lease_ms"),
        (
            json!({ "fingerprint": fp, "lease_ms": 1000, "wait_ms": 1.5 }),
            "wait_ms",
        ),
        (json!({ "fingerprint": fp }), "lease_ms"),
        (json!({ "fingerprint": fp, "lease_ms": 0 }), "lease_ms"),
        (
            json!({ "fingerprint": fp, "lease_ms": 1000, "retention_s": 0 }),
            "retention_s",
        ),
        // A record kept for less than its lease could run again instead of replaying.
        (
            json!({ "fingerprint": fp, "lease_ms": 5000, "retention_s": 4 }),
            "at least lease_ms",
        ),
    ];
    for (body, field) in cases {
        let detail = api
            .post(&path, Some(TOKEN), &body)
            .await
            .assert_problem(400, "bad_request");
        assert!(
            detail.contains(field),
            "detail `{detail}` should name `{field}` for {body}"
        );
    }

    let overflowing = format!("{{\"fingerprint\":\"{fp}\",\"lease_ms\":18446744073709551616}}");
    let detail = api
        .post_raw(&path, overflowing)
        .await
        .assert_problem(400, "bad_request");
    assert!(detail.contains("lease_ms"), "{detail}");

    let renew = api
        .post(
            &format!("{path}/renew"),
            Some(TOKEN),
            &json!({ "claim_id": "not-a-uuid", "lease_ms": 1000 }),
        )
        .await;
    assert!(
        renew
            .assert_problem(400, "bad_request")
            .contains("claim_id")
    );

    let release = api
        .post(
            &format!("{path}/release"),
            Some(TOKEN),
            &json!({ "claim_id": "018f0000-0000-7000-8000-000000000000", "as": "sideways" }),
        )
        .await;
    assert!(release.assert_problem(400, "bad_request").contains("as"));
}

#[tokio::test]
async fn scopes_in_paths_must_be_lowercase_hex_digests() {
    let server = start_server(&[]).await;
    let body = json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 1000 });
    for scope in [
        "not-hex".to_owned(),
        fresh_digest("upper").to_uppercase(),
        fresh_digest("short")[..63].to_owned(),
    ] {
        let detail = server
            .api
            .post(&format!("/v1/claims/{scope}"), Some(TOKEN), &body)
            .await
            .assert_problem(400, "bad_request");
        assert!(detail.contains("scope"), "{detail}");
        server
            .admin
            .get(&format!("/v1/records/{scope}"), Some(ADMIN))
            .await
            .assert_problem(400, "bad_request");
    }
}

#[tokio::test]
async fn records_queries_are_validated() {
    let server = start_server(&[]).await;
    for query in [
        "state=bogus",
        "limit=0",
        "limit=-3",
        "limit=100000",
        "colour=red",
    ] {
        server
            .admin
            .get(&format!("/v1/records?{query}"), Some(ADMIN))
            .await
            .assert_problem(400, "bad_request");
    }
}

#[tokio::test]
async fn a_body_that_is_not_base64_is_a_bad_request_and_keeps_the_lease() {
    let server = start_server(&[]).await;
    let (scope, _, claim_id) = server.api.win("b64").await;
    let bad = json!({
        "claim_id": claim_id,
        "response": { "status": 200, "headers": [], "body_b64": "not base64!" },
        "replayable": true,
    });
    let detail = server
        .api
        .post(&format!("/v1/claims/{scope}/finalize"), Some(TOKEN), &bad)
        .await
        .assert_problem(400, "bad_request");
    assert!(detail.contains("response.body_b64"), "{detail}");
    assert!(!detail.contains("not base64!"), "never echoed: {detail}");
    // The claim still owns its lease: a good finalize lands.
    server.api.finalize(&scope, &claim_id).await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_rejected_with_413() {
    let server = start_server(&["--max-body-bytes", "2048"]).await;
    let (scope, _, claim_id) = server.api.win("limit").await;
    let big = json!({
        "claim_id": claim_id,
        "response": { "status": 200, "headers": [], "body_b64": "A".repeat(4096) },
        "replayable": true,
    });
    server
        .api
        .post(&format!("/v1/claims/{scope}/finalize"), Some(TOKEN), &big)
        .await
        .assert_problem(413, "payload_too_large");
    // A body within the limit still goes through.
    server.api.finalize(&scope, &claim_id).await;
}

#[tokio::test]
async fn unknown_routes_are_problem_404s() {
    let server = start_server(&[]).await;
    server
        .api
        .get("/v2/nothing", Some(TOKEN))
        .await
        .assert_problem(404, "not_found");
}

#[tokio::test]
async fn wrong_methods_on_known_paths_are_problem_405s_naming_the_allowed_ones() {
    let server = start_server(&[]).await;
    let scope = fresh_digest("method");
    let cases = [
        (
            reqwest::Method::GET,
            format!("/v1/claims/{scope}"),
            TOKEN,
            "POST",
        ),
        (
            reqwest::Method::GET,
            format!("/v1/claims/{scope}/finalize"),
            TOKEN,
            "POST",
        ),
        (reqwest::Method::POST, "/healthz".to_owned(), TOKEN, "GET"),
        (
            reqwest::Method::PUT,
            format!("/v1/records/{scope}"),
            ADMIN,
            "DELETE",
        ),
    ];
    for (method, path, token, allowed) in cases {
        let listener = if path.starts_with("/v1/records") {
            &server.admin
        } else {
            &server.api
        };
        let answer = listener
            .send(method.clone(), &path, Some(token), |request| request)
            .await;
        let detail = answer.assert_problem(405, "method_not_allowed");
        assert!(
            detail.contains(method.as_str()),
            "{method} {path}: {detail}"
        );
        let allow = answer
            .headers
            .get("allow")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(allow.contains(allowed), "{method} {path}: allow `{allow}`");
    }
}
