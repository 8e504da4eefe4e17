//! F4 (`docs/record-outbox.md#renewal`): a handler that runs for three leases keeps its lease, because the
//! filter renews it from the root context's tick. A same-body request from another client
//! in the meantime never runs (it waits or is told the request is in progress), and once the
//! handler answers, everyone gets that one answer.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

/// A short lease, renewed more than six times per lease; with a 500 ms call timeout it is
/// the shortest the filter accepts for this interval (`renew_interval_ms + 2 ×
/// lease_store.timeout_ms + 600 ≤ lease_ms`, `docs/record-outbox.md#renewal`).
const LEASE_MS: u64 = 2000;
const RENEW_MS: u64 = 300;
const CALL_TIMEOUT_MS: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_held_for_three_leases_keeps_its_lease_and_everyone_gets_its_answer() {
    a_handler_held_for_three_leases(StackOptions::default()).await;
}

/// Under `uncertain: retry` a lapsed lease is taken over and the request runs again, so the
/// renewals alone keep it once: the native adapter renews from the main thread
/// (`filter-native/README.md#the-outbox-and-renewals`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_uncertain_retry_the_native_adapter_renews_a_handler_held_for_three_leases() {
    let retry = StackOptions::default().native_adapter().policy(|policy| {
        policy.insert("uncertain".into(), json!("retry"));
    });
    a_handler_held_for_three_leases(retry).await;
}

/// A handler held for three leases: nothing else runs, the follower gets its answer.
async fn a_handler_held_for_three_leases(options: StackOptions) {
    let stack = Stack::start(
        options
            .plugin(|plugin| plugin["lease_store"]["timeout_ms"] = json!(CALL_TIMEOUT_MS))
            .policy(|policy| {
                policy.insert("lease_ms".into(), json!(LEASE_MS));
                policy.insert("renew_interval_ms".into(), json!(RENEW_MS));
                policy.insert("follower_wait_ms".into(), json!(20_000));
            }),
    )
    .await;
    let body = json!({"amount": 333});
    let path = "/payments?hold=long";

    let winner = stack.post(path).key("long").json(&body).send();
    let others = async {
        stack.wait_for_gate("long", 1).await;
        let renewed_before = stack.store_metrics().await.event("renew");
        let follower = stack.post(path).key("long").json(&body).send();
        let watch = async {
            // Three leases' worth of renewals: had one been missed, the lease would have
            // expired and the waiting follower would have taken it over.
            let three_leases = 3 * LEASE_MS / RENEW_MS;
            stack
                .wait_for_store_event("renew", renewed_before + three_leases)
                .await;
            assert_eq!(
                stack.upstream_executions().await,
                1,
                "nothing else ran while the lease was renewed"
            );
            let store = stack.store_metrics().await;
            assert_eq!(
                store.event("recovered_abandoned"),
                0,
                "the lease was never stolen"
            );
            assert_eq!(store.event("lease_lost"), 0);
            stack.open_gate("long").await;
        };
        let (follower, ()) = tokio::join!(follower, watch);
        follower
    };
    let (winner, follower) = tokio::join!(winner, others);

    assert_eq!(winner.status, 201, "{winner}");
    match follower.status {
        503 => {
            follower.assert_problem(503, "request_in_progress");
        }
        _ => {
            follower.assert_replayed();
            assert_eq!(
                follower.body, winner.body,
                "the follower got the winner's answer"
            );
        }
    }
    let retry = stack.post(path).key("long").json(&body).send().await;
    retry.assert_replayed();
    assert_eq!(retry.body, winner.body);
    assert_eq!(stack.upstream_executions().await, 1);
    assert_eq!(stack.filter_counter("event.renew_error").await, 0);
    assert_eq!(stack.filter_counter("event.lease_stolen").await, 0);
}
