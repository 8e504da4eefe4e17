//! Under `uncertain: hold` a proxy that dies mid-request is not recovered by a retry: its
//! lease runs out, and the next same-body retry finds the record `unknown`
//! (`docs/records.md#a-lapsed-at-most-once-lease`) — 409 `operation_unknown`, the upstream
//! ran once, the store counts the held lapse, and an operator finds the record with
//! `lease-store records list --state unknown`. The `uncertain: retry` counterpart is
//! `crashed_winners_are_recovered`.

use std::time::Duration;

use keyflight_e2e::{Stack, StackOptions, retry_while_refused};
use serde_json::{Value, json};

/// The lease of the hold policy these scenarios run (the retry waits it out).
pub(crate) const LEASE_MS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_request_under_a_hold_policy_leaves_its_key_unknown_not_run_again() {
    let stack = Stack::start(StackOptions::default().two_replicas().policy(|policy| {
        policy.insert("lease_ms".into(), json!(LEASE_MS));
        policy.insert("follower_wait_ms".into(), json!(0));
        policy.insert("uncertain".into(), json!("hold"));
    }))
    .await;
    let body = json!({"amount": 77});
    a_killed_winner_is_held_not_run_again(&stack, (0, 1), "held", &body).await;
    let again = stack
        .post_via(1, "/payments?hold=held-crash")
        .key("held")
        .json(&body)
        .send()
        .await;
    again.assert_problem(409, "operation_unknown");
    let mut held = 0.0;
    for replica in 0..2 {
        held += stack
            .store_metrics_at(replica)
            .await
            .get("keyflight_store_lapses_held_total");
    }
    assert_eq!(held, 1.0, "the store counted the held lapse once");

    let listed: Value = serde_json::from_str(
        &stack
            .records_cli(&["--json", "list", "--state", "unknown"])
            .await,
    )
    .expect("records list --json prints JSON");
    let records = listed["records"].as_array().expect("a record list");
    assert_eq!(records.len(), 1, "the operator finds it: {listed}");
}

/// A winner through Envoy `winner` reaches the upstream (held at gate `{key}-crash`) and its
/// proxy is killed; once its lease runs out (and any takeover grace ends) the same-body retry
/// through Envoy `retry` gets 409 `operation_unknown`: the upstream ran once, and no lease
/// was taken over.
pub(crate) async fn a_killed_winner_is_held_not_run_again(
    stack: &Stack,
    (winner, retry): (usize, usize),
    key: &str,
    body: &Value,
) {
    let gate = format!("{key}-crash");
    let path = format!("/payments?hold={gate}");
    let won = stack.post_via(winner, &path).key(key).json(body).try_send();
    let crash = async {
        stack.wait_for_gate(&gate, 1).await;
        stack.kill_envoy(winner);
    };
    let (won, ()) = tokio::join!(won, crash);
    assert!(won.is_err(), "the caller lost its proxy: {won:?}");
    // The orphaned handler finishes into the void: the payment may well have happened.
    stack.open_gate(&gate).await;

    // Until the dead proxy's lease runs out (and any takeover grace ends) the request is in
    // progress; then it is unknown, never run again. A refusal that fails closed
    // (`journal_unavailable`: seen once in CI, when the store's body budget still charged
    // bodiless epoch questions in full) runs nothing either, and is retried as a client would.
    let answer = retry_while_refused(
        &["request_in_progress", "journal_unavailable"],
        Duration::from_millis(LEASE_MS),
        || stack.post_via(retry, &path).key(key).json(body).send(),
    )
    .await;
    answer.assert_problem(409, "operation_unknown");
    assert_eq!(stack.upstream_executions().await, 1, "the payment ran once");
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 0);
}
