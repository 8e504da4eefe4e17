//! F8 at the store's API: a finalize or an operator resolve whose headers
//! could split the replayed response, or hand one caller's credentials to
//! another, is refused with 400 naming the header's index, and nothing is
//! recorded.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use serde_json::{Value, json};

/// Header lists the store must refuse, with the index it must name.
fn bad_header_lists() -> Vec<(Value, usize)> {
    vec![
        (json!([["location", "/a\r\nset-cookie: s=1"]]), 0),
        (json!([["content-type", "text/plain"], ["etag", "a\nb"]]), 1),
        (json!([["etag", "\"v1\"\u{0}"]]), 0),
        (json!([["etag", "v\u{7f}"]]), 0),
        (json!([["etag", "v\u{1b}[0m"]]), 0),
        (json!([["etag", " v"]]), 0),
        (json!([["x bad", "v"]]), 0),
        (json!([["", "v"]]), 0),
        (json!([[":status", "200"]]), 0),
        (json!([["x\r\ny", "v"]]), 0),
        (json!([["etag", "v"], ["set-cookie", "s=1"]]), 1),
        (json!([["Set-Cookie", "s=1"]]), 0),
        (json!([["cookie", "s=1"]]), 0),
        (json!([["authorization", "Bearer x"]]), 0),
        (json!([["www-authenticate", "Bearer"]]), 0),
        (json!([["proxy-authenticate", "Basic"]]), 0),
        (json!([["authentication-info", "x"]]), 0),
        (json!([["proxy-authentication-info", "x"]]), 0),
        (json!([["x-session-token", "x"]]), 0),
        (json!([["x-client-secret", "x"]]), 0),
        (json!([["x-api-key", "x"]]), 0),
        (json!([["transfer-encoding", "chunked"]]), 0),
    ]
}

fn response_with(headers: &Value) -> Value {
    json!({ "status": 201, "headers": headers, "body_b64": "eyJpZCI6NDJ9" })
}

#[tokio::test]
async fn finalize_refuses_headers_that_may_not_be_recorded() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let admin = &server.admin;
    let (scope, fingerprint, claim_id) = api.win("bad-headers").await;
    let finalize = format!("/v1/claims/{scope}/finalize");

    for (headers, index) in bad_header_lists() {
        let body = json!({ "claim_id": claim_id, "response": response_with(&headers), "replayable": true });
        let detail = api
            .post(&finalize, Some(TOKEN), &body)
            .await
            .assert_problem(400, "bad_request");
        assert!(
            detail.contains(&format!("response.headers[{index}]")),
            "detail `{detail}` names response.headers[{index}] for {headers}"
        );
        assert!(
            !detail.contains("s=1") && !detail.contains("Bearer x"),
            "the detail never echoes a value: {detail}"
        );
    }

    // Nothing was recorded: the record is still pending and a follower is told so.
    let shown = admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(shown.json["state"], "pending", "{}", shown.text);
    assert_eq!(
        api.claim(&scope, &fingerprint, 0).await.outcome(),
        "in_progress"
    );

    // Tabs inside a value, obs-text and any token name are fine.
    let good = json!([
        ["content-type", "application/json; charset=utf-8"],
        ["x-note", "a\tb c"],
        ["content-language", "caf\u{e9}"],
        ["X-Custom!#$%&'*+.^_`|~", ""],
    ]);
    let body =
        json!({ "claim_id": claim_id, "response": response_with(&good), "replayable": true });
    let answer = api.post(&finalize, Some(TOKEN), &body).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let replay = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed");
    assert_eq!(replay.json["response"]["headers"], good);
}

#[tokio::test]
async fn resolve_refuses_headers_that_may_not_be_recorded() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let admin = &server.admin;
    let (scope, _fingerprint, claim_id) = api.win("bad-headers-resolve").await;
    api.release_unknown(&scope, &claim_id).await;
    let resolve = format!("/v1/records/{scope}/resolve");

    for (headers, index) in bad_header_lists() {
        let body = json!({ "as": "completed", "response": response_with(&headers), "reason": "r" });
        let detail = admin
            .post(&resolve, Some(ADMIN), &body)
            .await
            .assert_problem(400, "bad_request");
        assert!(
            detail.contains(&format!("response.headers[{index}]")),
            "detail `{detail}` names response.headers[{index}] for {headers}"
        );
    }
    let shown = admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(shown.json["state"], "unknown", "{}", shown.text);

    let good = json!([["content-type", "application/json"]]);
    let answer = admin
        .post(
            &resolve,
            Some(ADMIN),
            &json!({ "as": "completed", "response": response_with(&good), "reason": "r" }),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
}
