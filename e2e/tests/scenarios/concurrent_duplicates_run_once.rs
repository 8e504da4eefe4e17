//! F2, F5: many copies of one keyed request, sent at once, run the upstream once, and every
//! caller gets the winner's answer.

use futures_util::future::join_all;
use keyflight_e2e::reply::assert_one_answer_for_all;
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

const COPIES: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_duplicates_run_the_upstream_once() {
    // Followers may wait long: the test, not a timer, decides when the winner finishes.
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(20_000));
    }))
    .await;
    let body = json!({"amount": 4200, "currency": "EUR"});
    // Every copy carries `hold=burst`, so the one that reaches the upstream parks there
    // (and a copy that wrongly got through would park too, and be counted).
    let path = "/payments?hold=burst";

    let requests =
        join_all((0..COPIES).map(|_| stack.post(path).key("burst-key").json(&body).send()));
    let conductor = async {
        // The winner is running; all the others are long-polling the lease-store, a
        // worker's followers on one long-poll (`docs/stream-machine.md#herds`).
        stack.wait_for_gate("burst", 1).await;
        stack
            .eventually("every follower waits", || async {
                let parked = stack.store_metrics().await.event("follower_wait");
                let joined = stack.filter_counter("event.herd_joined").await;
                parked + joined >= (COPIES - 1) as u64
            })
            .await;
        assert_eq!(
            stack.upstream_executions().await,
            1,
            "only the winner may reach the upstream while it holds the lease"
        );
        stack.open_gate("burst").await;
    };
    let (replies, ()) = tokio::join!(requests, conductor);

    assert_eq!(stack.upstream_executions().await, 1);
    assert_one_answer_for_all(&replies, 201);
    assert_eq!(stack.filter_counter("outcome.won_completed").await, 1);
    assert_eq!(
        stack.filter_counter("outcome.replay").await,
        (COPIES - 1) as u64
    );
    let metrics = stack.store_metrics().await;
    assert_eq!(metrics.event("claimed"), 1);
    assert_eq!(metrics.event("finalize"), 1);
}
