//! L5, F3: a record lives for the policy's `retention_s`. Until then a retry replays it;
//! after it, the same request is a new operation and runs again (`recovered_ttl`), at the
//! edge cache as well as in the store.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_retry_after_retention_runs_again() {
    // A cleanup pass between the expiry and the retry would delete the record, and the
    // retry would then insert a fresh one (`claimed`, not `recovered_ttl`). The first pass
    // comes at a random moment within the interval (`lease-store/src/cleanup.rs`): within
    // the default minute it landed in that gap once in CI; within a week it does not.
    let stack = Stack::start(
        StackOptions::default()
            .policy(|policy| {
                // A retention may not be shorter than the lease (`docs/records.md#retention-and-cleanup`).
                policy.insert("retention_s".into(), json!(3));
                policy.insert("lease_ms".into(), json!(3000));
            })
            .store_env("KEYFLIGHT_CLEANUP_INTERVAL", "7d"),
    )
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
