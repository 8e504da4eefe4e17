//! F5, issue 48 item 9: a herd of same-key, same-body callers — more than the lease-store
//! parks on one scope — waits through one Envoy: each worker's followers share one
//! long-poll, so every caller gets the winner's answer and none is refused
//! (`docs/stream-machine.md#herds`).

use futures_util::future::join_all;
use keyflight_e2e::reply::assert_one_answer_for_all;
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

/// Above the lease-store's 256 long-polls per scope, and the 1,001 of issue 48's check:
/// hundreds per worker, answered over several root-context callbacks.
const CALLERS: usize = 1001;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn herds_wait_on_one_long_poll() {
    // Followers may wait long: the test, not a timer, decides when the winner finishes. The
    // store's calls may take longer than the demo's 1 s while 1,001 callers arrive on a
    // machine that runs other scenarios at once (a claim answered after it was seen failed
    // 504 here): this scenario is about herds, not about the store's timeout.
    let stack = Stack::start(
        StackOptions::default()
            .policy(|policy| {
                policy.insert("follower_wait_ms".into(), json!(20_000));
            })
            .plugin(|plugin| plugin["lease_store"]["timeout_ms"] = json!(4_000)),
    )
    .await;
    let body = json!({"amount": 1001, "currency": "EUR"});
    let path = "/payments?hold=herd";

    let requests =
        join_all((0..CALLERS).map(|_| stack.post(path).key("herd-key").json(&body).send()));
    let conductor = async {
        stack.wait_for_gate("herd", 1).await;
        // Every follower is accounted for: parked at the store, sharing a worker's
        // long-poll, or (as before the fix) refused.
        stack
            .eventually("every follower waits or was answered", || async {
                let parked = stack.store_metrics().await.event("follower_wait");
                let joined = stack.filter_counter("event.herd_joined").await;
                let refused = stack.filter_counter("outcome.in_progress_timeout").await
                    + stack.filter_counter("outcome.journal_unavailable").await;
                parked + joined + refused >= (CALLERS - 1) as u64
            })
            .await;
        assert_eq!(
            stack.upstream_executions().await,
            1,
            "only the winner reaches the upstream while it holds the lease"
        );
        stack.open_gate("herd").await;
    };
    let (replies, ()) = tokio::join!(requests, conductor);

    assert_eq!(stack.upstream_executions().await, 1);
    assert_one_answer_for_all(&replies, 201);
    assert_eq!(stack.filter_counter("outcome.won_completed").await, 1);
    assert_eq!(
        stack.filter_counter("outcome.replay").await,
        (CALLERS - 1) as u64
    );
    assert_eq!(stack.store_metrics().await.event("claimed"), 1);
}
