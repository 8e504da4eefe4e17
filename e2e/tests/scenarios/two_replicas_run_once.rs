//! Single flight at mesh scale (F2, F5, L4, L9): 64 concurrent copies of one keyed request,
//! split across two Envoys that talk to two lease-stores on one Postgres, run the upstream
//! once, and all 64 callers get the same status and body. Followers on the store the winner
//! did not use are woken by Postgres NOTIFY. Both Envoys run the shipped
//! `envoy/two-replicas.yaml`, each reaching both lease-stores (what `make up REPLICAS=2`
//! starts).

use futures_util::future::join_all;
use keyflight_e2e::reply::assert_one_answer_for_all;
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

const COPIES: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_duplicates_across_two_envoys_and_two_stores_run_once() {
    sixty_four_duplicates_across_two_envoys_run_once(StackOptions::default()).await;
}

/// The same with both Envoys running the native adapter (`envoy/native-two-replicas.yaml`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_duplicates_across_two_native_envoys_and_two_stores_run_once() {
    sixty_four_duplicates_across_two_envoys_run_once(StackOptions::default().native_adapter())
        .await;
}

async fn sixty_four_duplicates_across_two_envoys_run_once(options: StackOptions) {
    let stack = Stack::start(options.two_replicas().policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(20_000));
    }))
    .await;
    let body = json!({"amount": 6400, "currency": "EUR"});
    let path = "/payments?hold=mesh";

    let requests = join_all((0..COPIES).map(|i| {
        stack
            .post_via(i % 2, path)
            .key("mesh-key")
            .json(&body)
            .send()
    }));
    let conductor = async {
        stack.wait_for_gate("mesh", 1).await;
        stack
            .eventually(
                "63 followers long-polling across both lease-stores",
                || async {
                    // A worker's followers share one long-poll
                    // (`docs/stream-machine.md#herds`).
                    let waits = stack.store_metrics_at(0).await.event("follower_wait")
                        + stack.store_metrics_at(1).await.event("follower_wait");
                    let joined = stack.filter_counter_at(0, "event.herd_joined").await
                        + stack.filter_counter_at(1, "event.herd_joined").await;
                    waits + joined >= (COPIES - 1) as u64
                },
            )
            .await;
        assert_eq!(
            stack.upstream_executions().await,
            1,
            "only the winner may reach the upstream while it holds the lease"
        );
        stack.open_gate("mesh").await;
    };
    let (replies, ()) = tokio::join!(requests, conductor);

    assert_eq!(stack.upstream_executions().await, 1);
    assert_one_answer_for_all(&replies, 201);

    let (store0, store1) = (
        stack.store_metrics_at(0).await,
        stack.store_metrics_at(1).await,
    );
    assert_eq!(store0.event("claimed") + store1.event("claimed"), 1);
    assert_eq!(store0.event("finalize") + store1.event("finalize"), 1);
    for replica in 0..2 {
        assert!(
            stack.filter_counter_at(replica, "outcome.replay").await >= (COPIES / 2 - 1) as u64,
            "replica {replica} served its callers replays"
        );
    }
}
