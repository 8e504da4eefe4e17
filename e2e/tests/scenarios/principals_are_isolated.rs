//! K2, K3, F9: keys are scoped to the caller. One key from two principals is two
//! operations, and a replay never crosses principals.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn the_same_key_from_two_principals_runs_twice_and_replays_to_each_their_own() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 10});

    let alice = stack
        .post("/payments")
        .user("alice")
        .key("shared")
        .json(&body)
        .send()
        .await;
    let bob = stack
        .post("/payments")
        .user("bob")
        .key("shared")
        .json(&body)
        .send()
        .await;

    assert_eq!((alice.status, bob.status), (201, 201), "{alice}\n{bob}");
    assert_eq!(
        bob.header("idempotent-replayed"),
        None,
        "bob's request ran: {bob}"
    );
    assert_ne!(alice.json()["payment_id"], bob.json()["payment_id"]);
    assert_eq!(stack.upstream_executions().await, 2);

    let alice_again = stack
        .post("/payments")
        .user("alice")
        .key("shared")
        .json(&body)
        .send()
        .await;
    let bob_again = stack
        .post("/payments")
        .user("bob")
        .key("shared")
        .json(&body)
        .send()
        .await;

    assert_eq!(alice_again.body, alice.body, "alice gets alice's payment");
    assert_eq!(bob_again.body, bob.body, "bob gets bob's payment");
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn a_keyed_request_without_a_principal_is_refused() {
    // The demo policy keeps the default `anonymous: reject`.
    let stack = Stack::start(StackOptions::default()).await;

    let reply = stack
        .post("/payments")
        .anonymous()
        .key("k")
        .json(&json!({}))
        .send()
        .await;

    reply.assert_problem(401, "principal_required");
    assert_eq!(stack.upstream_executions().await, 0);
}
