//! F5: a follower of a running winner waits up to `follower_wait_ms`; past it, it gets 503
//! `request_in_progress` with Retry-After, and a retry after the winner finished replays.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_past_its_wait_gets_503_then_a_retry_replays() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(300));
    }))
    .await;
    let body = json!({"amount": 50});
    let path = "/payments?hold=slow";

    let winner = stack.post(path).key("k").json(&body).send();
    let follower_side = async {
        stack.wait_for_gate("slow", 1).await;
        let follower = stack.post(path).key("k").json(&body).send().await;
        follower.assert_problem(503, "request_in_progress");
        assert!(follower.retry_after_s() >= 1, "{follower}");
        assert_eq!(
            stack.upstream_executions().await,
            1,
            "the follower did not run"
        );
        stack.open_gate("slow").await;
    };
    let (winner, ()) = tokio::join!(winner, follower_side);
    assert_eq!(winner.status, 201, "{winner}");

    let retry = stack.post(path).key("k").json(&body).send().await;

    retry.assert_replayed();
    assert_eq!(retry.body, winner.body);
    assert_eq!(stack.upstream_executions().await, 1);
}
