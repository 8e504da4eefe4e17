//! F9: completed records are cached at the edge (Envoy shared data), so a hot replay makes
//! no lease-store call at all. A hit still checks the fingerprint (a different body is a
//! conflict, not a replay) and never crosses principals.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_cached_replay_makes_no_lease_store_call_and_still_checks_body_and_principal() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 9});

    let first = stack.post("/payments").key("hot").json(&body).send().await;
    assert_eq!(first.status, 201, "{first}");
    // Whether the winner's own finalize or the first replay fills the cache, the second
    // replay is served from it.
    let warm = stack.post("/payments").key("hot").json(&body).send().await;
    assert_eq!(warm.header("idempotent-replayed"), Some("true"), "{warm}");
    let store_before = stack.store_metrics().await.claims_total();
    let hits_before = stack.filter_counter("outcome.replay_edge_cache").await;

    let hot = stack.post("/payments").key("hot").json(&body).send().await;

    assert_eq!(hot.header("idempotent-replayed"), Some("true"), "{hot}");
    assert_eq!((hot.status, &hot.body), (first.status, &first.body));
    assert_eq!(
        stack.store_metrics().await.claims_total(),
        store_before,
        "the edge-cache hit asked the lease-store nothing"
    );
    assert_eq!(
        stack.filter_counter("outcome.replay_edge_cache").await,
        hits_before + 1,
        "the replay was counted as an edge-cache hit"
    );

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
