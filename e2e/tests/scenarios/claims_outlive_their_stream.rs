//! F14: a won claim outlives its stream, so the faults that make clients retry never run a
//! request twice. Each scenario holds the upstream at a gate, lands its fault around the
//! moment the answer is recorded, and then checks the history: how many times the upstream
//! ran, what the caller got, and what a same-key retry gets once the outbox has settled the
//! record. Without the outbox the record stays `pending`, its lease runs out, and the retry
//! takes it over (`recovered_abandoned`) and runs the payment again.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::process::Signal;
use serde_json::{Value, json};

/// A short lease, so that a record left pending would be taken over within the test.
const LEASE_MS: u64 = 3000;

fn short_lease(uncertain: &'static str) -> StackOptions {
    StackOptions::default().policy(move |policy| {
        policy.insert("lease_ms".into(), json!(LEASE_MS));
        // The longest interval that lets a renew hung for the whole 1 s call timeout be
        // retried within the lease (`docs/record-outbox.md#renewal`).
        policy.insert("renew_interval_ms".into(), json!(400));
        policy.insert("uncertain".into(), json!(uncertain));
    })
}

/// Waits until the only record is settled (not `pending`), but no longer than one lease
/// and a second: a record still pending by then could be taken over by the retry that
/// follows, and that retry's outcome is what the scenario asserts.
async fn settled_or_lease_over(stack: &Stack) {
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS + 1000);
    while Instant::now() < deadline {
        if only_record(stack).await["state"] != "pending" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The record of the only scope the stack has seen, as `lease-store records list` prints it.
async fn only_record(stack: &Stack) -> Value {
    let records = stack.records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    records[0].clone()
}

/// Sends `body` to `path` (which holds the upstream at gate `gone`) with key `gave-up`, from
/// a caller that hangs up after 300 ms; returns once the upstream runs and the caller is gone.
async fn caller_gives_up_while_the_upstream_runs(stack: &Stack, path: &str, body: &Value) {
    let caller = stack
        .post(path)
        .key("gave-up")
        .json(body)
        .timeout(Duration::from_millis(300))
        .try_send();
    let (caller, ()) = tokio::join!(caller, stack.wait_for_gate("gone", 1));
    assert!(caller.is_err(), "the caller timed out and hung up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_under_uncertain_hold_leaves_an_unknown_record_not_a_second_run() {
    let stack = Stack::start(short_lease("hold")).await;
    let body = json!({"amount": 10});
    let path = "/payments?hold=gone";

    caller_gives_up_while_the_upstream_runs(&stack, path, &body).await;
    settled_or_lease_over(&stack).await;
    stack.open_gate("gone").await;

    let retry = stack.post(path).key("gave-up").json(&body).send().await;
    retry.assert_problem(409, "operation_unknown");
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
    assert_eq!(only_record(&stack).await["state"], "unknown");
    assert_eq!(stack.filter_counter("event.caller_gone").await, 1);
    assert_eq!(stack.filter_counter("outbox.delivered").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_under_uncertain_retry_leaves_a_cooldown_not_a_stolen_lease() {
    let stack = Stack::start(short_lease("retry")).await;
    let body = json!({"amount": 11});
    let path = "/payments?hold=gone";

    caller_gives_up_while_the_upstream_runs(&stack, path, &body).await;
    settled_or_lease_over(&stack).await;
    assert_eq!(
        only_record(&stack).await["state"],
        "failed",
        "released for a cooldown, the documented at-least-once case of `uncertain: retry`"
    );
    assert_eq!(stack.store_metrics().await.event("recovered_abandoned"), 0);
    stack.open_gate("gone").await;
}

/// The store is killed while the stream records the answer: the outbox records it once the
/// store is back. Run under both adapters: the native one delivers its outbox from the main
/// thread (`filter-native/README.md#the-outbox-and-renewals`).
async fn a_lease_store_killed_while_the_answer_is_recorded(options: StackOptions) {
    let mut stack = Stack::start(options).await;
    let body = json!({"amount": 12});
    let path = "/payments?hold=kill";

    let caller = stack.post(path).key("killed").json(&body).send();
    let fault = async {
        stack.wait_for_gate("kill", 1).await;
        stack.signal_lease_store(0, Signal::Kill);
        stack.open_gate("kill").await;
    };
    let (first, ()) = tokio::join!(caller, fault);
    assert_eq!(
        first.status, 201,
        "the caller still gets its answer: {first}"
    );

    // While the store is down, a retry is refused and runs nothing.
    let during = stack.post(path).key("killed").json(&body).send().await;
    during.assert_problem(503, "journal_unavailable");

    stack.restart_lease_store().await;
    settled_or_lease_over(&stack).await;

    let retry = stack.post(path).key("killed").json(&body).send().await;
    assert_eq!(retry.status, 201, "{retry}");
    retry.assert_replayed();
    assert_eq!(retry.json(), first.json(), "the answer the caller got");
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
    assert_eq!(stack.filter_counter("outbox.delivered").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_store_killed_while_the_answer_is_recorded_still_records_it() {
    a_lease_store_killed_while_the_answer_is_recorded(short_lease("hold")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_store_killed_while_the_answer_is_recorded_still_records_it_under_the_native_adapter()
 {
    a_lease_store_killed_while_the_answer_is_recorded(short_lease("hold").native_adapter()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_store_frozen_past_the_call_timeout_does_not_lose_the_record() {
    let stack = Stack::start(short_lease("hold")).await;
    let body = json!({"amount": 13});
    let path = "/payments?hold=freeze";

    let caller = stack.post(path).key("frozen").json(&body).send();
    let fault = async {
        stack.wait_for_gate("freeze", 1).await;
        stack.signal_lease_store(0, Signal::Stop);
        stack.open_gate("freeze").await;
    };
    let (first, ()) = tokio::join!(caller, fault);
    // The caller's answer came after the stream's finalize timed out; the store thaws
    // once the outbox's first attempt timed out too and it sent the next.
    stack
        .eventually("the outbox sent the finalize again", || async {
            stack.filter_counter("outbox.retried").await >= 2
        })
        .await;
    stack.signal_lease_store(0, Signal::Cont);
    assert_eq!(
        first.status, 201,
        "delivered after the call timed out: {first}"
    );
    settled_or_lease_over(&stack).await;

    let retry = stack.post(path).key("frozen").json(&body).send().await;
    retry.assert_replayed();
    assert_eq!(retry.json(), first.json());
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_crash_while_the_answer_is_recorded_does_not_lose_the_record() {
    let stack = Stack::start(short_lease("hold")).await;
    let body = json!({"amount": 14});
    let path = "/payments?hold=crash";

    let caller = stack.post(path).key("crashed").json(&body).send();
    let fault = async {
        stack.wait_for_gate("crash", 1).await;
        stack.stop_postgres();
        stack.open_gate("crash").await;
    };
    let (first, ()) = tokio::join!(caller, fault);
    assert_eq!(first.status, 201, "{first}");
    stack.restart_postgres();
    settled_or_lease_over(&stack).await;

    let retry = stack.post(path).key("crashed").json(&body).send().await;
    retry.assert_replayed();
    assert_eq!(retry.json(), first.json());
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
}

#[tokio::test]
async fn an_answer_the_store_refuses_as_too_large_is_recorded_not_replayable() {
    // The filter believes the store takes 8 MiB (its default), the store takes 128 KiB:
    // a finalize of the 200 KB answer gets 413. It is recorded as completed but not
    // replayable, so the retry is refused instead of run again.
    let stack =
        Stack::start(short_lease("hold").store_env("KEYFLIGHT_MAX_BODY_BYTES", "131072")).await;
    let body = json!({"amount": 15, "note": "x".repeat(200 * 1024)});

    let first = stack.post("/payments").key("huge").json(&body).send().await;
    assert_eq!(first.status, 201, "the caller gets the whole answer");
    assert_eq!(first.json()["request"], body);
    settled_or_lease_over(&stack).await;

    let retry = stack.post("/payments").key("huge").json(&body).send().await;
    retry.assert_problem(409, "response_not_replayable");
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
    assert_eq!(stack.filter_counter("outbox.downgraded").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reconfigured_with_a_record_in_its_outbox_still_delivers_it() {
    // Istio pushes configuration often: the retired plugin's outbox must not die with it.
    let mut stack = Stack::start(short_lease("hold").reconfigurable()).await;
    let body = json!({"amount": 16});
    let path = "/payments?hold=push";

    let caller = stack.post(path).key("pushed").json(&body).send();
    let fault = async {
        stack.wait_for_gate("push", 1).await;
        stack.signal_lease_store(0, Signal::Kill);
        stack.open_gate("push").await;
    };
    let (first, ()) = tokio::join!(caller, fault);
    assert_eq!(first.status, 201, "{first}");

    // A new configuration replaces the listener and, once the old one has drained, retires
    // the plugin instance whose outbox holds the record.
    stack
        .reconfigure(|plugin| plugin["policies"][0]["follower_wait_ms"] = json!(4000))
        .await;
    stack
        .eventually("the old listener drained and was removed", || async {
            stack.envoy_stat("listener_manager.listener_modified").await == 1
                && stack
                    .envoy_stat("listener_manager.total_listeners_draining")
                    .await
                    == 0
        })
        .await;
    // Envoy retires the old plugin a moment after its listener is gone. Keep the store
    // down until it has (the filter logs it), or for long enough that a plugin that did
    // not wait for its outbox has surely been destroyed with it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && !stack
            .envoy_log()
            .contains("plugin retired with claims in the record outbox")
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stack.restart_lease_store().await;
    settled_or_lease_over(&stack).await;

    let retry = stack.post(path).key("pushed").json(&body).send().await;
    retry.assert_replayed();
    assert_eq!(retry.json(), first.json());
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
    let log = stack.envoy_log();
    assert!(
        log.contains("plugin retired with claims in the record outbox"),
        "the retired plugin stayed for its outbox"
    );
    stack
        .eventually(
            "the retired plugin finished once its outbox was empty",
            || async {
                stack
                    .envoy_log()
                    .contains("record outbox settled; plugin retired")
            },
        )
        .await;
}
