//! F3, F5, F6: the IETF draft's semantics, each a policy setting
//! (`docs/stream-machine.md#the-ietf-drafts-semantics`): `mismatch_status: 422` answers a reused
//! key with another body 422, `in_progress: conflict` answers a request whose original still
//! runs 409 at once, and `server_errors: record` / `uncertain: record` record a 5xx and
//! replay it instead of letting a retry run again.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::envoy_variants::EnvoyEdit;
use serde_json::json;

#[tokio::test]
async fn under_mismatch_status_422_a_reused_key_with_another_body_is_422() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("mismatch_status".into(), json!(422));
    }))
    .await;

    let first = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 100}))
        .send()
        .await;
    let other = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 999}))
        .send()
        .await;

    assert_eq!(first.status, 201, "{first}");
    other.assert_problem(422, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_in_progress_conflict_a_follower_gets_409_at_once_then_a_retry_replays() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("in_progress".into(), json!("conflict"));
        // The shipped policy's long-poll has no place beside an answer at once.
        policy.remove("follower_wait_ms");
    }))
    .await;
    let body = json!({"amount": 50});
    let path = "/payments?hold=slow";

    let winner = stack.post(path).key("k").json(&body).send();
    let follower_side = async {
        stack.wait_for_gate("slow", 1).await;
        let asked = Instant::now();
        let follower = stack.post(path).key("k").json(&body).send().await;
        follower.assert_problem(409, "request_in_progress");
        assert!(follower.retry_after_s() >= 1, "{follower}");
        // The gate is still shut, so the answer came without waiting for the winner; and
        // well before the 5 s a waiting follower would long-poll by default.
        assert!(
            asked.elapsed() < Duration::from_secs(4),
            "answered at once, not after a long-poll: {:?}",
            asked.elapsed()
        );
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

#[tokio::test]
async fn under_server_errors_record_a_500_is_recorded_and_replayed() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("server_errors".into(), json!("record"));
    }))
    .await;
    let body = json!({"amount": 1});
    let path = "/payments?status=500";

    let first = stack.post(path).key("k").json(&body).send().await;
    let retry = stack.post(path).key("k").json(&body).send().await;

    assert_eq!(
        first.status, 500,
        "the caller gets the upstream's answer: {first}"
    );
    assert_eq!(first.header("idempotent-replayed"), None, "{first}");
    assert_eq!(retry.status, 500, "{retry}");
    retry.assert_replayed();
    assert_eq!(retry.body, first.body);
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "the retry did not run"
    );
}

#[tokio::test]
async fn under_uncertain_record_an_upstream_timeout_is_recorded_and_replayed() {
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::RouteTimeout(Duration::from_millis(300)))
            .policy(|policy| {
                policy.insert("uncertain".into(), json!("record"));
            }),
    )
    .await;
    let body = json!({"amount": 2});
    let path = "/payments?delay_ms=1500";

    let first = stack.post(path).key("slow").json(&body).send().await;
    let retry = stack.post(path).key("slow").json(&body).send().await;

    assert_eq!(first.status, 504, "Envoy's own timeout answer: {first}");
    assert_eq!(retry.status, 504, "{retry}");
    retry.assert_replayed();
    assert_eq!(retry.body, first.body);
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "the retry did not run"
    );
}
