//! The operator API over HTTP (L6): show, list, resolve and erase.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn erase_needs_the_replay_risk_acknowledgment() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let admin = &server.admin;
    let (scope, fingerprint, claim_id) = api.win("erase").await;
    api.finalize(&scope, &claim_id).await;
    let path = format!("/v1/records/{scope}");

    let shown = admin.get(&path, Some(ADMIN)).await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    assert_eq!(shown.json["state"], "completed");
    assert_eq!(shown.json["fingerprint"], fingerprint.as_str());
    assert_eq!(shown.json["response"], sample_response());

    let listed = admin
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

    admin
        .send(Method::DELETE, &path, Some(ADMIN), |r| r)
        .await
        .assert_problem(400, "replay_risk_not_acknowledged");
    admin
        .send(Method::DELETE, &path, Some(ADMIN), |r| {
            r.header("keyflight-ack-replay-risk", "yes")
        })
        .await
        .assert_problem(400, "replay_risk_not_acknowledged");
    assert_eq!(
        admin.get(&path, Some(ADMIN)).await.status,
        200,
        "still there"
    );

    let erase = format!("{path}?reason=INC-1");
    let erased = admin
        .send(Method::DELETE, &erase, Some(ADMIN), |r| {
            r.header("keyflight-ack-replay-risk", "true")
        })
        .await;
    assert_eq!(erased.status, 200, "{}", erased.text);
    admin
        .get(&path, Some(ADMIN))
        .await
        .assert_problem(404, "not_found");
    admin
        .send(Method::DELETE, &erase, Some(ADMIN), |r| {
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
    let admin = &server.admin;
    let (scope, fingerprint, claim_id) = api.win("resolve").await;
    let resolve = format!("/v1/records/{scope}/resolve");
    let body = json!({ "as": "completed", "response": sample_response(), "reason": "INC-2" });

    // Pending is not unknown.
    admin
        .post(&resolve, Some(ADMIN), &body)
        .await
        .assert_problem(409, "not_unknown");

    api.release_unknown(&scope, &claim_id).await;
    assert_eq!(
        api.claim(&scope, &fingerprint, 0).await.outcome(),
        "unknown"
    );
    let unknown = admin.get("/v1/records?state=unknown", Some(ADMIN)).await;
    assert!(unknown.text.contains(&scope), "{}", unknown.text);

    let resolved = admin.post(&resolve, Some(ADMIN), &body).await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    let replay = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed");
    assert_eq!(replay.json["response"], sample_response());

    // Completed is not unknown either; a missing record is 404.
    admin
        .post(&resolve, Some(ADMIN), &body)
        .await
        .assert_problem(409, "not_unknown");
    admin
        .post(
            &format!("/v1/records/{}/resolve", fresh_digest("missing")),
            Some(ADMIN),
            &body,
        )
        .await
        .assert_problem(404, "not_found");
}

#[tokio::test]
async fn the_data_plane_listener_no_longer_answers_the_admin_api() {
    let server = start_server(&[]).await;
    let (scope, _, claim_id) = server.api.win("data-plane").await;
    server.api.finalize(&scope, &claim_id).await;
    server
        .api
        .get("/v1/records", Some(ADMIN))
        .await
        .assert_problem(404, "not_found");
    server
        .api
        .send(
            Method::DELETE,
            &format!("/v1/records/{scope}?reason=x"),
            Some(ADMIN),
            |r| r.header("keyflight-ack-replay-risk", "true"),
        )
        .await
        .assert_problem(404, "not_found");
    // The admin listener does, and serves no claim.
    assert_eq!(
        server
            .admin
            .get(&format!("/v1/records/{scope}"), Some(ADMIN))
            .await
            .status,
        200
    );
    server
        .admin
        .post(
            &format!("/v1/claims/{}", fresh_digest("admin-listener")),
            Some(TOKEN),
            &json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 1000 }),
        )
        .await
        .assert_problem(404, "not_found");
}

#[tokio::test]
async fn erase_and_resolve_need_a_reason() {
    let server = start_server(&[]).await;
    let (scope, _, claim_id) = server.api.win("no-reason").await;
    server.api.finalize(&scope, &claim_id).await;
    let path = format!("/v1/records/{scope}");
    for erase in [
        path.clone(),
        format!("{path}?reason="),
        format!("{path}?reason=%0Aforged"),
    ] {
        let detail = server
            .admin
            .send(Method::DELETE, &erase, Some(ADMIN), |r| {
                r.header("keyflight-ack-replay-risk", "true")
            })
            .await
            .assert_problem(400, "bad_request");
        assert!(detail.contains("reason"), "{erase}: {detail}");
    }
    let detail = server
        .admin
        .post(
            &format!("{path}/resolve"),
            Some(ADMIN),
            &json!({ "as": "failed" }),
        )
        .await
        .assert_problem(400, "bad_request");
    assert!(detail.contains("reason"), "{detail}");
    assert_eq!(
        server.admin.get(&path, Some(ADMIN)).await.status,
        200,
        "not erased"
    );
}

/// The audit rows of `scope`, oldest first: (actor, action, reason, response digest).
async fn audit_rows(scope: &str) -> Vec<(String, String, String, Option<Vec<u8>>)> {
    let (client, connection) = tokio_postgres::connect(&cluster().url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let scope = keyflight_protocol::Digest::from_hex(scope).unwrap();
    client
        .query(
            "SELECT actor, action, reason, response_sha256 FROM keyflight_operator_audit
             WHERE scope = $1 ORDER BY id",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

#[tokio::test]
async fn erases_and_resolves_are_audited_with_their_operator_and_reason() {
    let file = std::env::temp_dir().join(format!("keyflight-operators-{}", fresh_digest("f")));
    std::fs::write(
        &file,
        "alice:alice-token-for-tests\nbob:bob-token-for-tests\n",
    )
    .unwrap();
    let server = start_server(&["--admin-tokens-file", file.to_str().unwrap()]).await;
    let (api, admin) = (&server.api, &server.admin);

    let (erased, _, claim_id) = api.win("audited-erase").await;
    api.finalize(&erased, &claim_id).await;
    let answer = admin
        .send(
            Method::DELETE,
            &format!("/v1/records/{erased}?reason=GDPR%20request%2042"),
            Some("alice-token-for-tests"),
            |r| r.header("keyflight-ack-replay-risk", "true"),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        audit_rows(&erased).await,
        [(
            "alice".into(),
            "erase".into(),
            "GDPR request 42".into(),
            None
        )]
    );
    assert!(
        server.child.log().contains("alice"),
        "the log names the operator"
    );

    let (resolved, _, claim_id) = api.win("audited-resolve").await;
    api.post(
        &format!("/v1/claims/{resolved}/release"),
        Some(TOKEN),
        &json!({ "claim_id": claim_id, "as": "unknown" }),
    )
    .await;
    let response = sample_response();
    let answer = admin
        .post(
            &format!("/v1/records/{resolved}/resolve"),
            Some("bob-token-for-tests"),
            &json!({ "as": "completed", "response": response, "reason": "INC-7" }),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let stored: keyflight_protocol::wire::StoredResponse =
        serde_json::from_value(response).unwrap();
    let digest = keyflight_lease_store::store::response_digest(&stored);
    assert_eq!(
        audit_rows(&resolved).await,
        [(
            "bob".into(),
            "resolve_completed".into(),
            "INC-7".into(),
            Some(digest.0.to_vec())
        )]
    );

    // A token removed from the file stops working without a restart.
    std::fs::write(&file, "bob:bob-token-for-tests\n").unwrap();
    admin
        .get("/v1/records", Some("alice-token-for-tests"))
        .await
        .assert_problem(401, "unauthorized");
    std::fs::remove_file(&file).unwrap();
}

#[tokio::test]
async fn audit_rows_cannot_be_changed_or_deleted() {
    let server = start_server(&[]).await;
    let (scope, _, claim_id) = server.api.win("append-only").await;
    server.api.finalize(&scope, &claim_id).await;
    let answer = server
        .admin
        .send(
            Method::DELETE,
            &format!("/v1/records/{scope}?reason=cleanup"),
            Some(ADMIN),
            |r| r.header("keyflight-ack-replay-risk", "true"),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let (client, connection) = tokio_postgres::connect(&cluster().url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    for sql in [
        "DELETE FROM keyflight_operator_audit",
        "UPDATE keyflight_operator_audit SET actor = 'someone-else'",
        "TRUNCATE keyflight_operator_audit",
    ] {
        let refused = client.batch_execute(sql).await;
        assert!(refused.is_err(), "{sql} went through");
    }
    assert_eq!(audit_rows(&scope).await.len(), 1);
}
