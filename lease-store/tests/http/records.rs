//! The operator API over HTTP (L6): show, list, resolve and erase.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn erase_needs_the_replay_risk_acknowledgment() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let (scope, fingerprint, claim_id) = api.win("erase").await;
    api.finalize(&scope, &claim_id).await;
    let path = format!("/v1/records/{scope}");

    let shown = api.get(&path, Some(ADMIN)).await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    assert_eq!(shown.json["state"], "completed");
    assert_eq!(shown.json["fingerprint"], fingerprint.as_str());
    assert_eq!(shown.json["response"], sample_response());

    let listed = api
        .get("/v1/records?state=completed&limit=1000", Some(ADMIN))
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert!(
        listed.json["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["scope"] == scope.as_str() && r.get("response").is_none()),
        "the list holds the record, without its body: {}",
        listed.text
    );

    api.send(Method::DELETE, &path, Some(ADMIN), |r| r)
        .await
        .assert_problem(400, "replay_risk_not_acknowledged");
    api.send(Method::DELETE, &path, Some(ADMIN), |r| {
        r.header("keyflight-ack-replay-risk", "yes")
    })
    .await
    .assert_problem(400, "replay_risk_not_acknowledged");
    assert_eq!(api.get(&path, Some(ADMIN)).await.status, 200, "still there");

    let erased = api
        .send(Method::DELETE, &path, Some(ADMIN), |r| {
            r.header("keyflight-ack-replay-risk", "true")
        })
        .await;
    assert_eq!(erased.status, 200, "{}", erased.text);
    api.get(&path, Some(ADMIN))
        .await
        .assert_problem(404, "not_found");
    api.send(Method::DELETE, &path, Some(ADMIN), |r| {
        r.header("keyflight-ack-replay-risk", "true")
    })
    .await
    .assert_problem(404, "not_found");
    assert!(
        server.child.log().contains(&scope) && server.child.log().contains("erased"),
        "the erasure is logged with its scope"
    );
    // The key runs again.
    assert_eq!(api.claim(&scope, &fingerprint, 0).await.outcome(), "won");
}

#[tokio::test]
async fn only_unknown_records_can_be_resolved() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let (scope, fingerprint, claim_id) = api.win("resolve").await;
    let resolve = format!("/v1/records/{scope}/resolve");
    let body = json!({ "as": "completed", "response": sample_response() });

    // Pending is not unknown.
    api.post(&resolve, Some(ADMIN), &body)
        .await
        .assert_problem(409, "not_unknown");

    let released = api
        .post(
            &format!("/v1/claims/{scope}/release"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "as": "unknown" }),
        )
        .await;
    assert_eq!(released.status, 200, "{}", released.text);
    assert_eq!(
        api.claim(&scope, &fingerprint, 0).await.outcome(),
        "unknown"
    );
    let unknown = api.get("/v1/records?state=unknown", Some(ADMIN)).await;
    assert!(unknown.text.contains(&scope), "{}", unknown.text);

    let resolved = api.post(&resolve, Some(ADMIN), &body).await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    let replay = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed");
    assert_eq!(replay.json["response"], sample_response());

    // Completed is not unknown either; a missing record is 404.
    api.post(&resolve, Some(ADMIN), &body)
        .await
        .assert_problem(409, "not_unknown");
    api.post(
        &format!("/v1/records/{}/resolve", fresh_digest("missing")),
        Some(ADMIN),
        &body,
    )
    .await
    .assert_problem(404, "not_found");
}
