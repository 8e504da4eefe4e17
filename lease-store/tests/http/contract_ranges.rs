//! What schemathesis found, pinned at the HTTP API: every request the OpenAPI
//! document allows is accepted, and every value it rules out is refused with
//! 400 naming the field (never a database error, never a 5xx).

#![allow(clippy::unwrap_used)]

use crate::support::*;
use keyflight_protocol::wire::{MAX_COOLDOWN_MS, MAX_LEASE_MS, MAX_RETENTION_S, MAX_WAIT_MS};
use serde_json::json;

/// JSON Schema counts `30000.0` as an integer; the store used to refuse it.
#[tokio::test]
async fn integral_numbers_are_integers() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let scope = fresh_digest("integral");
    let claim = api
        .post(
            &format!("/v1/claims/{scope}"),
            Some(TOKEN),
            &json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 30000.0, "wait_ms": 0.0, "retention_s": 8.64e4 }),
        )
        .await;
    assert_eq!(claim.outcome(), "won", "{}", claim.text);
    let claim_id = claim.json["claim_id"].as_str().unwrap();
    let renew = api
        .post(
            &format!("/v1/claims/{scope}/renew"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "lease_ms": 1e4 }),
        )
        .await;
    assert_eq!(renew.status, 200, "{}", renew.text);
    let finalize = api
        .post(
            &format!("/v1/claims/{scope}/finalize"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "replayable": true,
                     "response": { "status": 201.0, "headers": [], "body_b64": "" } }),
        )
        .await;
    assert_eq!(finalize.status, 200, "{}", finalize.text);

    let fractional = api
        .post(
            &format!("/v1/claims/{}", fresh_digest("integral")),
            Some(TOKEN),
            &json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 30000.5 }),
        )
        .await;
    assert!(
        fractional
            .assert_problem(400, "bad_request")
            .contains("lease_ms")
    );
}

/// The published maxima are accepted (no timestamp overflow in the
/// database), one past them is refused naming the field.
#[tokio::test]
async fn published_ranges_hold_at_their_edges() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let claim = |lease_ms: u64, extra: serde_json::Value| {
        let mut body = json!({ "fingerprint": fresh_digest("fp"), "lease_ms": lease_ms });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };

    let at_max = claim(
        MAX_LEASE_MS,
        json!({ "retention_s": MAX_RETENTION_S, "wait_ms": MAX_WAIT_MS }),
    );
    let scope = fresh_digest("max");
    let won = api
        .post(&format!("/v1/claims/{scope}"), Some(TOKEN), &at_max)
        .await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();
    let renew = api
        .post(
            &format!("/v1/claims/{scope}/renew"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "lease_ms": MAX_LEASE_MS }),
        )
        .await;
    assert_eq!(renew.status, 200, "{}", renew.text);
    let release = api
        .post(
            &format!("/v1/claims/{scope}/release"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "as": "cooldown", "cooldown_ms": MAX_COOLDOWN_MS }),
        )
        .await;
    assert_eq!(release.status, 200, "{}", release.text);

    for (body, field) in [
        (claim(MAX_LEASE_MS + 1, json!({})), "lease_ms"),
        (
            claim(1000, json!({ "retention_s": MAX_RETENTION_S + 1 })),
            "retention_s",
        ),
        (
            claim(1000, json!({ "wait_ms": MAX_WAIT_MS + 1 })),
            "wait_ms",
        ),
    ] {
        let detail = api
            .post(
                &format!("/v1/claims/{}", fresh_digest("over")),
                Some(TOKEN),
                &body,
            )
            .await
            .assert_problem(400, "bad_request");
        assert!(detail.contains(field), "`{detail}` names {field}");
    }

    let (scope, _, claim_id) = api.win("over").await;
    let detail = api
        .post(
            &format!("/v1/claims/{scope}/renew"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "lease_ms": MAX_LEASE_MS + 1 }),
        )
        .await
        .assert_problem(400, "bad_request");
    assert!(detail.contains("lease_ms"), "{detail}");
    let detail = api
        .post(
            &format!("/v1/claims/{scope}/release"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "as": "cooldown", "cooldown_ms": MAX_COOLDOWN_MS + 1 }),
        )
        .await
        .assert_problem(400, "bad_request");
    assert!(detail.contains("cooldown_ms"), "{detail}");
    for status in [99, 600] {
        let detail = api
            .post(
                &format!("/v1/claims/{scope}/finalize"),
                Some(TOKEN),
                &json!({ "claim_id": claim_id, "replayable": true,
                         "response": { "status": status, "headers": [], "body_b64": "" } }),
            )
            .await
            .assert_problem(400, "bad_request");
        assert!(detail.contains("response.status"), "{detail}");
    }
}
