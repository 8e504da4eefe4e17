//! The claim API over HTTP: a full round trip, and a long-poll woken across replicas (L4).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

#[tokio::test]
async fn claim_finalize_then_claim_again_replays_the_recorded_response() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let scope = fresh_digest("round-trip");
    let fingerprint = fresh_digest("fp");

    let won = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(won.outcome(), "won");
    assert_eq!(won.json["how"], "claimed");
    assert!(won.json["fence"].as_i64().unwrap() > 0);
    let claim_id = won.json["claim_id"].as_str().unwrap();

    // While pending: a same-fingerprint claim without a wait is in progress,
    // another fingerprint is a conflict.
    let follower = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(follower.outcome(), "in_progress");
    assert!(follower.json["retry_after_s"].as_u64().unwrap() >= 1);
    assert_eq!(
        api.claim(&scope, &fresh_digest("other"), 0).await.outcome(),
        "conflict"
    );

    let renewed = api
        .post(
            &format!("/v1/claims/{scope}/renew"),
            Some(TOKEN),
            &json!({ "claim_id": claim_id, "lease_ms": 30_000 }),
        )
        .await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
    assert_eq!(renewed.json["lease_ms"], 30_000);

    let recorded = api.finalize(&scope, claim_id).await;
    let replay = api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed");
    assert_eq!(replay.json["response"], recorded);

    // The winner's claim is settled: further writes with it have lost the lease.
    api.post(
        &format!("/v1/claims/{scope}/release"),
        Some(TOKEN),
        &json!({ "claim_id": claim_id, "as": "forget" }),
    )
    .await
    .assert_problem(409, "lease_lost");
}

#[tokio::test]
async fn a_long_poll_is_woken_by_a_finalize_on_another_replica() {
    let replica_1 = start_server(&[]).await;
    let replica_2 = start_server(&[]).await;
    assert_long_poll_woken_across(&replica_1.api, &replica_2.api).await;
}

#[tokio::test]
async fn waits_are_capped_by_max_wait() {
    let server = start_server(&["--max-wait", "200ms"]).await;
    let (scope, fingerprint, _) = server.api.win("capped").await;
    let started = Instant::now();
    let answer = server.api.claim(&scope, &fingerprint, 30_000).await;
    assert_eq!(answer.outcome(), "in_progress");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a 30 s wait should have been capped at 200 ms, took {:?}",
        started.elapsed()
    );
}

/// F9, hole 4 of issue 19: a replay says how long its record has left (its retention,
/// counted from the claim that created it), so an edge caches it no longer; no other outcome
/// carries the field.
#[tokio::test]
async fn a_replay_carries_the_retention_its_record_has_left() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let scope = fresh_digest("expiry");
    let path = format!("/v1/claims/{scope}");
    let body = json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 30_000, "retention_s": 30 });

    let claimed_at = Instant::now();
    let won = api.post(&path, Some(TOKEN), &body).await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    assert!(
        won.json.get("record_expires_in_ms").is_none(),
        "{}",
        won.text
    );
    let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();
    api.finalize(&scope, &claim_id).await;

    let replay = api.post(&path, Some(TOKEN), &body).await;
    let elapsed = claimed_at.elapsed();
    assert_eq!(replay.outcome(), "completed", "{}", replay.text);
    let left = replay.json["record_expires_in_ms"].as_u64().unwrap();
    assert!(left < 30_000, "{left}");
    assert!(
        u128::from(left) + elapsed.as_millis() >= 29_000,
        "{left} + {elapsed:?}"
    );
}

/// An edge that names frames in `Accept` gets a `completed` answer with the recorded body
/// as raw bytes after its JSON (`docs/records.md#the-recorded-body-as-bytes`). A caller that
/// does not ask (an operator, the CLI, a filter that predates frames) gets JSON, and no
/// other outcome is framed.
#[tokio::test]
async fn a_replay_is_framed_only_for_a_caller_that_asks() {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use keyflight_protocol::wire::framed;

    let server = start_server(&[]).await;
    let api = &server.api;
    let (scope, fingerprint, claim_id) = api.win("framed").await;
    let path = format!("/v1/claims/{scope}");
    let claim = json!({ "fingerprint": fingerprint, "lease_ms": 60_000 });
    let accept = format!("application/json, {}", framed::MEDIA_TYPE);
    let asking = |accept: String| {
        let claim = claim.clone();
        move |r: reqwest::RequestBuilder| r.header("accept", accept).json(&claim)
    };
    let content_type = |headers: &reqwest::header::HeaderMap| {
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };

    let pending = api
        .send(
            reqwest::Method::POST,
            &path,
            Some(TOKEN),
            asking(accept.clone()),
        )
        .await;
    assert_eq!(pending.outcome(), "in_progress");
    assert_eq!(
        content_type(&pending.headers).as_deref(),
        Some("application/json")
    );

    let recorded: &[u8] = b"\x00\xff\n{\"id\":42}\r\n";
    let response = json!({
        "status": 201,
        "headers": [["content-type", "application/octet-stream"]],
        "body_b64": STANDARD.encode(recorded),
    });
    api.finalize_with(&scope, &claim_id, &response).await;

    let answer = reqwest::Client::new()
        .post(format!("{}{path}", api.base))
        .bearer_auth(TOKEN)
        .header("accept", &accept)
        .json(&claim)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        content_type(answer.headers()).as_deref(),
        Some(framed::MEDIA_TYPE)
    );
    let frame = answer.bytes().await.unwrap();
    let (head, body) = framed::split(&frame).unwrap();
    assert_eq!(body, recorded);
    let head: serde_json::Value = serde_json::from_slice(head).unwrap();
    assert_eq!(head["outcome"], "completed", "{head}");
    assert_eq!(
        head["response"],
        json!({ "status": 201, "headers": [["content-type", "application/octet-stream"]], "body_b64": "" })
    );
    assert!(head["record_expires_in_ms"].as_u64().is_some(), "{head}");
    assert_eq!(api.counter("keyflight_store_framed_answers_total").await, 1);

    for accept in [
        None,
        Some("*/*".to_owned()),
        Some(format!("{};q=0, application/json", framed::MEDIA_TYPE)),
    ] {
        let plain = api
            .send(
                reqwest::Method::POST,
                &path,
                Some(TOKEN),
                |r| match accept {
                    Some(accept) => r.header("accept", accept).json(&claim),
                    None => r.json(&claim),
                },
            )
            .await;
        assert_eq!(plain.outcome(), "completed");
        assert_eq!(
            content_type(&plain.headers).as_deref(),
            Some("application/json")
        );
        assert_eq!(
            plain.json["response"]["body_b64"],
            STANDARD.encode(recorded)
        );
    }
    assert_eq!(api.counter("keyflight_store_framed_answers_total").await, 1);
}
