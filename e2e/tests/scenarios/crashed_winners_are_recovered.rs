//! A proxy that dies mid-request stops renewing, so its lease runs out; then exactly one
//! same-body retry (through the other replica) takes the operation over
//! (`recovered_abandoned`) and runs it again, while a different body with the same key is
//! still a conflict and never takes it over. A lease-store replica that started moments
//! ago holds takeovers for its takeover grace (the winner might be alive with the record in
//! its outbox), so the retry may hear `request_in_progress` a little longer than the lease.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions, retry_while_refused};
use serde_json::json;

const LEASE_MS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_request_is_recovered_by_one_same_body_retry_after_its_lease() {
    let stack = Stack::start(StackOptions::default().two_replicas().policy(|policy| {
        policy.insert("lease_ms".into(), json!(LEASE_MS));
        policy.insert("follower_wait_ms".into(), json!(0));
        // The at-least-once takeover this proves is `uncertain: retry`'s; the default
        // holds (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
        policy.insert("uncertain".into(), json!("retry"));
    }))
    .await;
    let body = json!({"amount": 66});
    let path = "/payments?hold=crash";

    // The winner enters through replica 0, reaches the upstream, and its proxy dies.
    let winner = stack.post_via(0, path).key("crash").json(&body).try_send();
    let crash = async {
        stack.wait_for_gate("crash", 1).await;
        stack.kill_envoy(0);
        Instant::now()
    };
    let (winner, killed_at) = tokio::join!(winner, crash);
    assert!(winner.is_err(), "the caller lost its proxy: {winner:?}");
    // The orphaned handler finishes into the void; later copies pass the gate.
    stack.open_gate("crash").await;

    // Until the dead proxy's lease runs out, the same request is in progress.
    let early = stack
        .post_via(1, path)
        .key("crash")
        .json(&body)
        .send()
        .await;
    early.assert_problem(503, "request_in_progress");
    assert_eq!(stack.upstream_executions().await, 1);

    // Past the lease (the last renewal came before the kill).
    tokio::time::sleep_until((killed_at + Duration::from_millis(LEASE_MS + 300)).into()).await;
    let other = stack
        .post_via(1, path)
        .key("crash")
        .json(&json!({"amount": 67}))
        .send()
        .await;
    other.assert_problem(409, "idempotency_conflict");
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "a different body never takes over"
    );

    let retry = retry_while_refused(&["request_in_progress"], Duration::ZERO, || {
        stack.post_via(1, path).key("crash").json(&body).send()
    })
    .await;
    assert_eq!(retry.status, 201, "{retry}");
    assert_eq!(
        retry.header("idempotent-replayed"),
        None,
        "the retry ran: {retry}"
    );
    assert_eq!(stack.upstream_executions().await, 2);
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 1);
    assert_eq!(
        stack
            .filter_counter_at(1, "event.recovered_abandoned")
            .await,
        1
    );

    let again = stack
        .post_via(1, path)
        .key("crash")
        .json(&body)
        .send()
        .await;
    again.assert_replayed();
    assert_eq!(again.body, retry.body);
    assert_eq!(
        stack.upstream_executions().await,
        2,
        "the recovery ran exactly once"
    );
}
