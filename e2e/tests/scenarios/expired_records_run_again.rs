//! L5, F3: a record lives for the policy's `retention_s`. Until then a retry replays it;
//! after it, the same request is a new operation and runs again (`recovered_ttl`), at the
//! edge cache as well as in the store.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_retry_after_retention_runs_again() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("retention_s".into(), json!(1));
    }))
    .await;
    let body = json!({"amount": 11});

    let first = stack.post("/payments").key("ttl").json(&body).send().await;
    assert_eq!(first.status, 201, "{first}");

    // Retry until the answer is no longer a replay; every replay before that ran nothing.
    stack
        .eventually("the record to expire and the retry to run", || async {
            let retry = stack.post("/payments").key("ttl").json(&body).send().await;
            assert_eq!(retry.status, 201, "{retry}");
            if retry.header("idempotent-replayed").is_some() {
                assert_eq!(
                    retry.body, first.body,
                    "a replay before expiry is the record"
                );
                false
            } else {
                true
            }
        })
        .await;
    assert_eq!(
        stack.upstream_executions().await,
        2,
        "the expired record ran once more"
    );
    assert_eq!(stack.store_metrics().await.event("recovered_ttl"), 1);
    assert_eq!(stack.filter_counter("event.recovered_ttl").await, 1);
}
