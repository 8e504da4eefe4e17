//! F2: when the journal cannot be reached, a guarded request fails closed (503
//! `journal_unavailable` with Retry-After) and the upstream never sees it.

use keyflight_e2e::{Reply, Stack, StackOptions};
use serde_json::json;

/// The guarded request is refused, and an unguarded one still runs: the 503 comes from the
/// guard, not from a broken Envoy or upstream.
async fn assert_guarded_requests_fail_closed(stack: &Stack) {
    let guarded: Reply = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 1}))
        .send()
        .await;
    guarded.assert_problem(503, "journal_unavailable");
    assert!(guarded.retry_after_s() >= 1, "{guarded}");
    assert_eq!(
        stack.upstream_executions().await,
        0,
        "the upstream was never called"
    );
    assert_eq!(stack.filter_counter("outcome.journal_unavailable").await, 1);

    let unguarded = stack
        .post("/payments")
        .json(&json!({"amount": 1}))
        .send()
        .await;
    assert_eq!(unguarded.status, 201, "{unguarded}");
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn lease_store_down_fails_closed_without_calling_the_upstream() {
    let mut stack = Stack::start(StackOptions::default()).await;
    stack.stop_lease_store();
    assert_guarded_requests_fail_closed(&stack).await;
}

#[tokio::test]
async fn postgres_down_fails_closed_without_calling_the_upstream() {
    let stack = Stack::start(StackOptions::default()).await;
    stack.stop_postgres();
    assert_guarded_requests_fail_closed(&stack).await;
}
