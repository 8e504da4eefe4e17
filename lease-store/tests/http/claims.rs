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
    let scope = fresh_digest("cross-replica");
    let fingerprint = fresh_digest("fp");

    let won = replica_2.api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(won.outcome(), "won");
    let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();

    let follower = tokio::spawn({
        let api = replica_1.api.clone();
        let (scope, fingerprint) = (scope.clone(), fingerprint.clone());
        async move {
            let answer = api.claim(&scope, &fingerprint, 30_000).await;
            (answer, Instant::now())
        }
    });
    // Replica 1 counts `follower_wait` just before the follower starts waiting.
    replica_1
        .api
        .wait_counter("keyflight_store_events_total{event=\"follower_wait\"}", 1)
        .await;
    // …and /metrics shows it parked.
    replica_1
        .api
        .wait_counter("keyflight_store_longpoll_waiting", 1)
        .await;
    assert!(
        !follower.is_finished(),
        "the follower must still be waiting"
    );

    let finalized_at = Instant::now();
    let recorded = replica_2.api.finalize(&scope, &claim_id).await;
    let (answer, answered_at) = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the follower was never woken")
        .unwrap();
    let latency = answered_at.duration_since(finalized_at);
    println!("follower woke {latency:?} after the finalize on the other replica");
    assert_eq!(answer.outcome(), "completed");
    assert_eq!(answer.json["response"], recorded);
    assert!(
        latency < Duration::from_secs(2),
        "woken after {latency:?}: NOTIFY did not reach the other replica"
    );
    assert_eq!(
        replica_1
            .api
            .counter("keyflight_store_longpoll_waiting")
            .await,
        0,
        "no long-poll parked any more"
    );
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
    let body = json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 60_000, "retention_s": 30 });

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
