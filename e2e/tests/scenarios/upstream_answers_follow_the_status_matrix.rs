//! F6: what the upstream answered decides what is recorded. Client errors that describe the
//! request are replayed; authz answers are not recorded; retryable failures put the scope
//! in a cooldown, after which the same request may run again.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_422_is_recorded_and_replayed() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": -1});

    let first = stack
        .post("/payments?status=422")
        .key("k")
        .json(&body)
        .send()
        .await;
    let retry = stack
        .post("/payments?status=422")
        .key("k")
        .json(&body)
        .send()
        .await;

    assert_eq!(first.status, 422, "{first}");
    assert_eq!(
        (retry.status, retry.header("idempotent-replayed")),
        (422, Some("true")),
        "{retry}"
    );
    assert_eq!(retry.body, first.body);
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn a_403_is_not_recorded_so_a_retry_runs_again() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 1});

    let first = stack
        .post("/payments?status=403")
        .key("k")
        .json(&body)
        .send()
        .await;
    let retry = stack
        .post("/payments?status=403")
        .key("k")
        .json(&body)
        .send()
        .await;

    assert_eq!((first.status, retry.status), (403, 403), "{first}\n{retry}");
    assert_eq!(retry.header("idempotent-replayed"), None, "{retry}");
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn a_500_cools_down_then_the_same_request_may_run_again() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("failure_cooldown_ms".into(), json!(1000));
    }))
    .await;
    let body = json!({"amount": 1});
    let path = "/payments?status=500";

    let first = stack.post(path).key("k").json(&body).send().await;
    assert_eq!(
        first.status, 500,
        "the caller gets the upstream's answer: {first}"
    );

    let during = stack.post(path).key("k").json(&body).send().await;
    during.assert_problem(503, "retryable_cooldown");
    assert!(during.retry_after_s() >= 1, "{during}");
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "nothing ran during the cooldown"
    );

    // Retry until the cooldown has passed (each refused attempt runs nothing).
    stack
        .eventually("the cooldown to pass and the retry to run", || async {
            let retry = stack.post(path).key("k").json(&body).send().await;
            match retry.status {
                503 => {
                    retry.assert_problem(503, "retryable_cooldown");
                    false
                }
                _ => {
                    assert_eq!(retry.status, 500, "the retry ran: {retry}");
                    true
                }
            }
        })
        .await;
    assert_eq!(stack.upstream_executions().await, 2);
}
