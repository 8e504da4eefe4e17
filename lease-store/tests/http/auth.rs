//! L7 over HTTP: bearer tokens per endpoint family, and the open operability endpoints.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use serde_json::json;

#[tokio::test]
async fn claims_without_or_with_a_wrong_token_are_unauthorized() {
    let server = start_server(&[]).await;
    let path = format!("/v1/claims/{}", fresh_digest("auth"));
    let body = json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 1000 });
    for token in [None, Some("wrong-token"), Some("filter-token-for-test")] {
        let answer = server.api.post(&path, token, &body).await;
        answer.assert_problem(401, "unauthorized");
        assert_eq!(
            answer.headers.get("www-authenticate").unwrap(),
            "Bearer",
            "401 names the scheme"
        );
    }
}

#[tokio::test]
async fn the_admin_api_needs_the_admin_token() {
    let server = start_server(&[]).await;
    server
        .admin
        .get("/v1/records", Some(TOKEN))
        .await
        .assert_problem(403, "forbidden");
    server
        .admin
        .get("/v1/records", None)
        .await
        .assert_problem(401, "unauthorized");
    let answer = server.admin.get("/v1/records", Some(ADMIN)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.json["records"].is_array());
}

#[tokio::test]
async fn the_admin_token_cannot_claim() {
    let server = start_server(&[]).await;
    let answer = server
        .api
        .post(
            &format!("/v1/claims/{}", fresh_digest("admin-claims")),
            Some(ADMIN),
            &json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 1000 }),
        )
        .await;
    answer.assert_problem(403, "forbidden");
}

#[tokio::test]
async fn operability_endpoints_need_no_token_and_metrics_count_traffic() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let admin = &server.admin;
    for path in ["/healthz", "/readyz", "/openapi.json", "/metrics"] {
        let answer = api.get(path, None).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.text);
    }
    let openapi = api.get("/openapi.json", None).await;
    assert!(openapi.json["paths"]["/v1/claims/{scope}"]["post"].is_object());

    let (scope, fingerprint, claim_id) = api.win("metrics").await;
    api.finalize(&scope, &claim_id).await;
    assert_eq!(
        api.claim(&scope, &fingerprint, 0).await.outcome(),
        "completed"
    );
    admin.get("/v1/records", None).await;

    let metrics = api.get("/metrics", None).await;
    assert!(
        metrics
            .headers
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    for series in [
        "keyflight_store_claims_total{outcome=\"won\"} 1",
        "keyflight_store_claims_total{outcome=\"completed\"} 1",
        "keyflight_store_events_total{event=\"claimed\"} 1",
        "keyflight_store_events_total{event=\"finalize\"} 1",
        "keyflight_store_errors_total{code=\"unauthorized\"} 1",
        "keyflight_store_request_duration_seconds_count{route=\"/v1/claims/{scope}\"} 2",
        "keyflight_store_pool_size",
        "keyflight_store_pool_available",
        "keyflight_store_pool_waiting",
        "keyflight_store_longpoll_waiting 0",
        "keyflight_store_ttl_deletes_total",
    ] {
        assert!(
            metrics.text.contains(series),
            "missing `{series}` in /metrics:\n{}",
            metrics.text
        );
    }
}
