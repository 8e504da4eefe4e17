//! K3, K4: repeated query parameters keep their relative order. Frameworks read the first,
//! the last or all values of a repeated name in order, so `?to=ann&to=bob` and
//! `?to=bob&to=ann` are two different requests and one never gets the other's answer.
//! What the caller then sees depends on the policy's scope: under `scope: route` the query
//! is part of the scope, so the reordered request is another operation and runs; under
//! `scope: service` it shares the scope and is a 409 conflict. Parameters with different
//! names may be reordered freely: that is the same request and it replays.

use keyflight_e2e::{Reply, Stack, StackOptions};
use serde_json::{Value, json};

/// The same payment under key `notify-1`, first as `?to=ann&to=bob`, then as `?to=bob&to=ann`.
async fn both_orders(stack: &Stack, body: &Value) -> (Reply, Reply) {
    let ann_bob = stack
        .post("/payments?to=ann&to=bob")
        .key("notify-1")
        .json(body)
        .send()
        .await;
    let bob_ann = stack
        .post("/payments?to=bob&to=ann")
        .key("notify-1")
        .json(body)
        .send()
        .await;
    (ann_bob, bob_ann)
}

#[tokio::test]
async fn under_route_scope_reordered_repeats_are_another_operation() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 5});
    let (ann_bob, bob_ann) = both_orders(&stack, &body).await;

    assert_eq!(
        (ann_bob.status, bob_ann.status),
        (201, 201),
        "{ann_bob}\n{bob_ann}"
    );
    assert_eq!(bob_ann.header("idempotent-replayed"), None, "{bob_ann}");
    assert_ne!(ann_bob.body, bob_ann.body, "bob_ann ran on its own");
    assert_eq!(stack.upstream_executions().await, 2);

    // Each order replays its own answer; other names may move around it.
    let again = stack
        .post("/payments?x=1&to=ann&to=bob")
        .key("notify-2")
        .json(&body)
        .send()
        .await;
    assert_eq!(again.status, 201, "{again}");
    let moved = stack
        .post("/payments?to=ann&to=bob&x=1")
        .key("notify-2")
        .json(&body)
        .send()
        .await;
    moved.assert_replayed();
    assert_eq!(moved.body, again.body);
    assert_eq!(stack.upstream_executions().await, 3);
}

#[tokio::test]
async fn under_service_scope_reordered_repeats_are_a_conflict() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("scope".into(), json!("service"));
    }))
    .await;
    let body = json!({"amount": 5});
    let (ann_bob, bob_ann) = both_orders(&stack, &body).await;

    assert_eq!(ann_bob.status, 201, "{ann_bob}");
    bob_ann.assert_problem(409, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
}
