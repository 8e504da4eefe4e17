//! F6: 5xx, 408 and 429 mark the operation failed with a cooldown. During it a retry gets
//! 503 `retryable_cooldown` with Retry-After and nothing runs; after it, exactly one of many
//! concurrent same-body retries runs again. (The basic 500 case is in
//! `upstream_answers_follow_the_status_matrix.rs`.)

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_503_408_or_429_puts_the_operation_in_a_cooldown() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        // Long enough that no retry below can outlive it.
        policy.insert("failure_cooldown_ms".into(), json!(60_000));
    }))
    .await;
    let body = json!({"amount": 1});

    for (ran, status) in [503u16, 408, 429].into_iter().enumerate() {
        let path = format!("/payments?status={status}");
        let key = format!("cooldown-{status}");
        let first = stack.post(&path).key(&key).json(&body).send().await;
        assert_eq!(
            first.status, status,
            "the caller gets the upstream's answer: {first}"
        );

        let retry = stack.post(&path).key(&key).json(&body).send().await;
        retry.assert_problem(503, "retryable_cooldown");
        assert!(retry.retry_after_s() >= 1, "{retry}");
        assert_eq!(
            stack.upstream_executions().await,
            ran as u64 + 1,
            "the retry after a {status} did not run"
        );
    }
    assert_eq!(
        stack.store_metrics().await.event("finalize"),
        0,
        "nothing was recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_cooldown_exactly_one_of_eight_concurrent_retries_runs() {
    const COOLDOWN_MS: u64 = 1000;
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("failure_cooldown_ms".into(), json!(COOLDOWN_MS));
    }))
    .await;
    let body = json!({"amount": 2});
    let path = "/payments?status=502";

    let first = stack.post(path).key("once").json(&body).send().await;
    assert_eq!(first.status, 502, "{first}");
    // The cooldown started before the answer arrived: past this deadline it is over.
    let over = Instant::now() + Duration::from_millis(COOLDOWN_MS + 200);
    tokio::time::sleep_until(over.into()).await;

    let retries = join_all((0..8).map(|_| stack.post(path).key("once").json(&body).send())).await;

    let ran: Vec<_> = retries.iter().filter(|reply| reply.status == 502).collect();
    assert_eq!(ran.len(), 1, "exactly one retry ran: {retries:#?}");
    for reply in retries.iter().filter(|reply| reply.status != 502) {
        reply.assert_problem(503, "retryable_cooldown");
    }
    assert_eq!(stack.upstream_executions().await, 2);
    assert_eq!(stack.store_metrics().await.event("recovered_abandoned"), 1);
}
