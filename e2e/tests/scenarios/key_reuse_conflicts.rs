//! K3, K4, F3: a key reused for a different request is a 409 conflict and never runs; what
//! counts as "the same operation" depends on the policy's scope.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn same_key_with_a_different_body_is_a_conflict() {
    let stack = Stack::start(StackOptions::default()).await;

    let first = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 100}))
        .send()
        .await;
    let other = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 999}))
        .send()
        .await;

    assert_eq!(first.status, 201, "{first}");
    other.assert_problem(409, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn the_same_json_written_differently_is_the_same_request() {
    let stack = Stack::start(StackOptions::default()).await;

    let first = stack
        .post("/payments")
        .key("k")
        .body(r#"{"amount":100,"currency":"EUR"}"#)
        .send()
        .await;
    // Same JSON value (RFC 8785): other member order, other spacing, `1.0e2` for 100.
    let again = stack
        .post("/payments")
        .key("k")
        .body("{ \"currency\": \"EUR\",  \"amount\": 1.0e2 }")
        .send()
        .await;

    assert_eq!(first.status, 201, "{first}");
    again.assert_replayed();
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn same_key_with_a_different_if_match_is_a_conflict() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 100});

    let first = stack
        .post("/payments")
        .key("k")
        .header("if-match", "\"v1\"")
        .json(&body)
        .send()
        .await;
    let other = stack
        .post("/payments")
        .key("k")
        .header("if-match", "\"v2\"")
        .json(&body)
        .send()
        .await;

    assert_eq!(first.status, 201, "{first}");
    other.assert_problem(409, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn route_scope_treats_another_route_as_another_operation() {
    // The demo policy ships `scope: route`: method and path are part of the scope.
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 100});

    let payment = stack.post("/payments").key("k").json(&body).send().await;
    let capture = stack
        .post("/payments/capture")
        .key("k")
        .json(&body)
        .send()
        .await;

    assert_eq!(payment.status, 201, "{payment}");
    assert_eq!(capture.status, 201, "{capture}");
    assert_eq!(capture.header("idempotent-replayed"), None, "{capture}");
    assert_eq!(stack.upstream_executions().await, 2);

    // Each route has its own record: a retry on either replays that route's answer.
    let capture_again = stack
        .post("/payments/capture")
        .key("k")
        .json(&body)
        .send()
        .await;
    capture_again.assert_replayed();
    assert_eq!(capture_again.body, capture.body);
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn service_scope_treats_another_route_as_a_conflict() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("scope".into(), json!("service"));
    }))
    .await;
    let body = json!({"amount": 100});

    let payment = stack.post("/payments").key("k").json(&body).send().await;
    let capture = stack
        .post("/payments/capture")
        .key("k")
        .json(&body)
        .send()
        .await;

    assert_eq!(payment.status, 201, "{payment}");
    capture.assert_problem(409, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
}
