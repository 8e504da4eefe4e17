//! F11 rollout modes. `mode: dry_run` claims and records but never blocks or replays: a
//! conflicting request still reaches the upstream, and the filter counts what enforce would
//! have done. `failure_mode: open` lets a guarded request through unguarded when the
//! lease-store is down, and counts it.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn dry_run_lets_conflicts_and_replays_through_and_counts_them() {
    let stack = Stack::start(StackOptions::default().plugin(|plugin| {
        plugin["mode"] = json!("dry_run");
    }))
    .await;

    let first = stack
        .post("/payments")
        .key("dry")
        .json(&json!({"amount": 1}))
        .send()
        .await;
    let conflicting = stack
        .post("/payments")
        .key("dry")
        .json(&json!({"amount": 2}))
        .send()
        .await;
    let duplicate = stack
        .post("/payments")
        .key("dry")
        .json(&json!({"amount": 1}))
        .send()
        .await;

    for reply in [&first, &conflicting, &duplicate] {
        assert_eq!(reply.status, 201, "dry_run never blocks: {reply}");
        assert_eq!(
            reply.header("idempotent-replayed"),
            None,
            "dry_run never replays: {reply}"
        );
    }
    assert_eq!(stack.upstream_executions().await, 3);
    assert_eq!(
        stack.store_metrics().await.event("claimed"),
        1,
        "it did claim"
    );
    assert_eq!(stack.filter_counter("dry_run.conflict").await, 1);
    assert_eq!(stack.filter_counter("dry_run.replay").await, 1);
    assert_eq!(
        stack.filter_counter("outcome.conflict").await,
        0,
        "nothing was refused"
    );
}

#[tokio::test]
async fn failure_mode_open_runs_guarded_requests_unguarded_while_the_store_is_down() {
    let mut stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("failure_mode".into(), json!("open"));
    }))
    .await;
    stack.stop_lease_store();
    let body = json!({"amount": 1});

    let first = stack.post("/payments").key("open").json(&body).send().await;
    let again = stack.post("/payments").key("open").json(&body).send().await;

    assert_eq!((first.status, again.status), (201, 201), "{first}\n{again}");
    assert_eq!(stack.upstream_executions().await, 2, "unguarded: both ran");
    assert_eq!(stack.filter_counter("event.fail_open").await, 2);
    assert_eq!(stack.filter_counter("outcome.unguarded").await, 2);
    assert_eq!(stack.filter_counter("outcome.journal_unavailable").await, 0);
}

/// A lease-store call that cannot even be dispatched (here: no such cluster, as when the
/// store's cluster has no host at all) fails synchronously, inside the filter's own body
/// callback. Under `failure_mode: open` the request must still go on whole, body included.
#[tokio::test]
async fn fail_open_passes_the_whole_request_when_the_store_cannot_be_dispatched_to() {
    let stack = Stack::start(
        StackOptions::default()
            .plugin(|plugin| plugin["lease_store"]["cluster"] = json!("no_such_cluster"))
            .policy(|policy| {
                policy.insert("failure_mode".into(), json!("open"));
            }),
    )
    .await;
    let body = json!({"amount": 12});

    let reply = stack
        .post("/payments")
        .key("nowhere")
        .json(&body)
        .send()
        .await;

    assert_eq!(reply.status, 201, "{reply}");
    assert_eq!(
        reply.json()["request"],
        body,
        "the upstream got the body: {reply}"
    );
    assert_eq!(stack.upstream_executions().await, 1);
    assert_eq!(stack.filter_counter("event.fail_open").await, 1);
}
