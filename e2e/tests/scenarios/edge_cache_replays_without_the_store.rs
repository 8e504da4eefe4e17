//! F9: completed records are cached at the edge (Envoy shared data), so a hot replay makes
//! no lease-store call at all. A hit still checks the fingerprint (a different body is a
//! conflict, not a replay) and never crosses principals.
//!
//! A worker uses its cache once it has heard the lease-store's operator epoch (its first
//! tick after start), so the test replays until a hit is counted rather than assuming the
//! first replays are hits.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_cached_replay_makes_no_lease_store_call_and_still_checks_body_and_principal() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 9});

    let first = stack.post("/payments").key("hot").json(&body).send().await;
    assert_eq!(first.status, 201, "{first}");

    // Replays until one is an edge-cache hit; that one must have asked the store nothing.
    stack
        .eventually("a replay served from the edge cache", || async {
            let store_before = stack.store_metrics().await.claims_total();
            let hits_before = stack.filter_counter("outcome.replay_edge_cache").await;
            let replay = stack.post("/payments").key("hot").json(&body).send().await;
            replay.assert_replayed();
            assert_eq!((replay.status, &replay.body), (first.status, &first.body));
            let hit = stack.filter_counter("outcome.replay_edge_cache").await > hits_before;
            let claims = stack.store_metrics().await.claims_total() - store_before;
            assert_eq!(
                claims,
                u64::from(!hit),
                "a hit asks the store nothing, a miss claims once"
            );
            hit
        })
        .await;

    let other_body = stack
        .post("/payments")
        .key("hot")
        .json(&json!({"amount": 10}))
        .send()
        .await;
    other_body.assert_problem(409, "idempotency_conflict");
    let bob = stack
        .post("/payments")
        .user("bob")
        .key("hot")
        .json(&body)
        .send()
        .await;
    assert_eq!(bob.status, 201, "{bob}");
    assert_eq!(
        bob.header("idempotent-replayed"),
        None,
        "bob never gets alice's answer: {bob}"
    );
    assert_eq!(stack.upstream_executions().await, 2);
}
