//! The shipped configuration, as users run it, on the retries that come from uncertain
//! outcomes: a client that timed out while the service charged the card, and an upstream that
//! ran the charge and then reset the connection. Under the default `uncertain: hold`
//! (`docs/guarantee.md#at-most-once-and-at-least-once-policies`) the retry with the same key
//! and body gets 409 `operation_unknown`, never a second charge. One scenario runs
//! `envoy/demo.yaml`'s policy as shipped (it states `hold`), the other the same policy with
//! no `uncertain` at all, the filter's own default.

use std::time::Duration;

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

/// The demo policy with its `uncertain` line taken out: a configuration that says nothing.
fn saying_nothing() -> StackOptions {
    StackOptions::default().policy(|policy| {
        assert_eq!(
            policy.remove("uncertain"),
            Some(json!("hold")),
            "envoy/demo.yaml states its choice"
        );
    })
}

/// A caller that hangs up after 300 ms while the upstream is held at gate `charge`; once
/// Envoy has seen it go (the stream released the record `unknown`), the upstream completes
/// the charge (its answer goes nowhere); the retry is held. Opening the gate sooner would
/// race Envoy's reading of the hang-up: an answer that reaches Envoy first is recorded and
/// replayed, which is the outcome known, not the uncertain one this scenario is about.
async fn a_caller_that_timed_out_is_charged_once(stack: &Stack, key: &str) {
    let path = "/payments?hold=charge";
    let body = json!({"amount": 25, "card": "4242"});
    let caller = stack
        .post(path)
        .key(key)
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

    for _ in 0..2 {
        let retry = stack.post(path).key(key).json(&body).send().await;
        retry.assert_problem(409, "operation_unknown");
    }
    assert_eq!(stack.upstream_executions().await, 1, "charged once");
    assert_eq!(stack.filter_counter("event.caller_gone").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_shipped_a_caller_that_timed_out_during_the_charge_is_charged_once() {
    let stack = Stack::start(StackOptions::default()).await;
    a_caller_that_timed_out_is_charged_once(&stack, "timed-out-shipped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saying_nothing_a_caller_that_timed_out_during_the_charge_is_charged_once() {
    let stack = Stack::start(saying_nothing()).await;
    a_caller_that_timed_out_is_charged_once(&stack, "timed-out-default").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saying_nothing_an_upstream_that_charged_then_reset_is_charged_once() {
    let mut stack = Stack::start(saying_nothing()).await;
    let path = "/payments?hold=doomed";
    let body = json!({"amount": 26});

    let first = stack.post(path).key("reset").json(&body).send();
    let crash = async {
        stack.wait_for_gate("doomed", 1).await;
        stack.kill_upstream();
    };
    let (first, ()) = tokio::join!(first, crash);
    assert!(
        (500..600).contains(&first.status),
        "Envoy answers the reset itself: {first}"
    );

    stack.restart_upstream().await;
    stack.open_gate("doomed").await;
    let retry = stack.post(path).key("reset").json(&body).send().await;
    retry.assert_problem(409, "operation_unknown");
    assert_eq!(
        stack.upstream_executions().await,
        0,
        "nothing ran on the restarted upstream"
    );
}
