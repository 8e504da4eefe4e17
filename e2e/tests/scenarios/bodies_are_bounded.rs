//! F1: a guarded request's body is buffered up to the policy's cap; past it the answer is
//! 413 `payload_too_large` and nothing runs. Also checks that Envoy's buffer limit in
//! `envoy/demo.yaml` leaves room for the cap (else Envoy's own 413 would answer instead).

use keyflight_e2e::{Stack, StackOptions};

/// The demo policy's `max_request_body_bytes`.
const CAP: usize = 1024 * 1024;

#[tokio::test]
async fn a_body_over_the_cap_is_refused_and_one_at_the_cap_runs() {
    let stack = Stack::start(StackOptions::default()).await;

    let over = stack
        .post("/payments")
        .key("big")
        .content_type("application/octet-stream")
        .body(vec![b'x'; CAP + 1])
        .send()
        .await;
    over.assert_problem(413, "payload_too_large");
    assert_eq!(stack.upstream_executions().await, 0);

    let at_cap = stack
        .post("/payments")
        .key("exact")
        .content_type("application/octet-stream")
        .body(vec![b'x'; CAP])
        .send()
        .await;
    assert_eq!(
        at_cap.status, 201,
        "a body of exactly the cap is accepted: {}",
        at_cap.status
    );
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn a_smaller_policy_cap_is_enforced() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("max_request_body_bytes".into(), serde_json::json!(1024));
    }))
    .await;

    let over = stack
        .post("/payments")
        .key("k")
        .content_type("application/octet-stream")
        .body(vec![b'x'; 1025])
        .send()
        .await;

    over.assert_problem(413, "payload_too_large");
    assert_eq!(stack.upstream_executions().await, 0);
}
