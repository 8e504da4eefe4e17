//! `uncertain: reconcile` (`docs/reconcile.md`): when a payment's outcome is uncertain, the
//! retry does not wait for an operator: keyflight asks the service, which answers from the
//! ledger it commits its payments with (`keyflight-effects`). A payment that committed is
//! answered with the first run's answer; one that never committed is fenced out and runs
//! once more, under a higher fence. Either way the card is charged once.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions, retry_while_refused};
use serde_json::{Value, json};

const LEASE_MS: u64 = 3000;

/// The demo policy under `uncertain: reconcile`, asking the demo upstream with the stack's
/// reconcile token; the upstream keeps its payments in Postgres.
fn reconciling() -> StackOptions {
    StackOptions::default().upstream_effects().policy(|policy| {
        policy.insert("uncertain".into(), json!("reconcile"));
        policy.insert(
            "reconcile".into(),
            json!({"cluster": "demo_upstream", "token_env": "KEYFLIGHT_RECONCILE_TOKEN"}),
        );
    })
}

/// Entry `execution` (1-based) of the upstream's execution log.
async fn logged(stack: &Stack, execution: usize) -> Value {
    stack.upstream_execution_log().await[execution - 1].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_timed_out_after_the_charge_gets_the_first_answer_on_its_retry() {
    let stack = Stack::start(reconciling()).await;
    // The charge commits, then the answer is held until the caller has given up.
    let path = "/payments?hold_committed=charge";
    let body = json!({"amount": 31});
    let caller = stack
        .post(path)
        .key("timed-out")
        .json(&body)
        .timeout(Duration::from_millis(300))
        .try_send();
    let (caller, ()) = tokio::join!(caller, stack.wait_for_gate("charge", 1));
    assert!(caller.is_err(), "the caller timed out and hung up");
    stack
        .eventually("the hung-up caller's record to be held unknown", || async {
            stack.record_states().await == ["unknown"]
        })
        .await;
    stack.open_gate("charge").await;

    let retry = stack.post(path).key("timed-out").json(&body).send().await;
    assert_eq!(retry.status, 201, "{retry}");
    let first = logged(&stack, 1).await;
    assert_eq!(
        retry.json()["execution"],
        json!(1),
        "the first run's answer: {retry}"
    );
    assert_eq!(retry.json()["fence"], first["fence"], "{retry}");
    assert_eq!(stack.upstream_executions().await, 1, "nothing ran again");
    assert_eq!(stack.upstream_payments().await, 1, "charged once");
    assert_eq!(stack.filter_counter("event.reconcile_committed").await, 1);
    assert_eq!(stack.store_event_total("reconciled_committed").await, 1);

    // keyflight recorded it: the next retry is replayed without asking again.
    let again = stack.post(path).key("timed-out").json(&body).send().await;
    again.assert_replayed();
    assert_eq!(again.json()["execution"], json!(1));
    assert_eq!(stack.filter_counter("event.reconcile_committed").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_after_the_charge_committed_leaves_a_retry_the_first_answer() {
    let stack = Stack::start(reconciling().two_replicas().policy(|policy| {
        policy.insert("lease_ms".into(), json!(LEASE_MS));
        policy.insert("follower_wait_ms".into(), json!(0));
    }))
    .await;
    let path = "/payments?hold_committed=paid";
    let body = json!({"amount": 32});

    let winner = stack
        .post_via(0, path)
        .key("lost-proxy")
        .json(&body)
        .try_send();
    let crash = async {
        stack.wait_for_gate("paid", 1).await;
        assert_eq!(stack.upstream_payments().await, 1, "the payment committed");
        stack.kill_envoy(0);
        Instant::now()
    };
    let (winner, killed_at) = tokio::join!(winner, crash);
    assert!(winner.is_err(), "the caller lost its proxy: {winner:?}");
    stack.open_gate("paid").await;

    // Past the dead proxy's lease the record is held unknown, and the retry asks.
    tokio::time::sleep_until((killed_at + Duration::from_millis(LEASE_MS + 300)).into()).await;
    let retry = retry_while_refused(&["request_in_progress"], Duration::ZERO, || {
        stack.post_via(1, path).key("lost-proxy").json(&body).send()
    })
    .await;
    assert_eq!(retry.status, 201, "{retry}");
    assert_eq!(
        retry.json()["execution"],
        json!(1),
        "the first run's answer: {retry}"
    );
    assert_eq!(stack.upstream_executions().await, 1, "nothing ran again");
    assert_eq!(stack.upstream_payments().await, 1, "charged once");
    assert_eq!(
        stack
            .filter_counter_at(1, "event.reconcile_committed")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_that_never_committed_is_fenced_out_and_runs_once_more() {
    let mut stack = Stack::start(reconciling()).await;
    let path = "/payments?hold=doomed";
    let body = json!({"amount": 33});

    // The upstream dies inside the payment's transaction: nothing committed.
    let first = stack.post(path).key("doomed").json(&body).send();
    let crash = async {
        stack.wait_for_gate("doomed", 1).await;
        stack.kill_upstream();
    };
    let (first, ()) = tokio::join!(first, crash);
    assert!((500..600).contains(&first.status), "{first}");
    stack.restart_upstream().await;
    stack.open_gate("doomed").await;
    let held = stack.records().await;
    assert_eq!(held[0]["state"], json!("unknown"), "{held:?}");
    let held_fence = held[0]["fence"].as_i64().expect("a fence");

    let retry = stack.post(path).key("doomed").json(&body).send().await;
    assert_eq!(retry.status, 201, "absent: the retry ran: {retry}");
    assert_eq!(stack.upstream_payments().await, 1, "charged once");
    assert_eq!(stack.filter_counter("event.reconcile_absent").await, 1);
    assert_eq!(stack.store_event_total("reconciled_absent").await, 1);
    let rerun = stack.upstream_execution_log().await;
    assert_eq!(
        rerun.len(),
        1,
        "the restarted upstream ran it once: {rerun:?}"
    );
    assert!(
        rerun[0]["fence"]
            .as_str()
            .and_then(|f| f.parse::<i64>().ok())
            > Some(held_fence),
        "under a higher fence than {held_fence}: {rerun:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cannot_reach_the_reconcile_endpoint() {
    let stack = Stack::start(reconciling()).await;
    let reply = stack
        .post("/.well-known/keyflight/reconcile")
        .json(&json!({}))
        .send()
        .await;
    reply.assert_problem(403, "forbidden");
}
