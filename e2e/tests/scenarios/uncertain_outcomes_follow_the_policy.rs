//! F6 uncertain outcomes: when the upstream's effect is unknown (Envoy timed the upstream
//! out, or the upstream died mid-request), `uncertain: retry` treats it as a retryable
//! failure (cooldown, then one retry runs), and `uncertain: hold` (the default) records it as
//! `unknown`: every retry gets 409 `operation_unknown` until an operator resolves the record
//! with `lease-store records resolve`.

use std::time::Duration;

use keyflight_e2e::{Stack, StackOptions, retry_while_refused};
use keyflight_testkit::envoy_variants::EnvoyEdit;
use serde_json::{Value, json};

/// Envoy gives up on the upstream after this; the upstream takes longer.
const ROUTE_TIMEOUT: Duration = Duration::from_millis(300);
const SLOW_PATH: &str = "/payments?delay_ms=1500";

fn timing_out(uncertain: &str) -> StackOptions {
    let uncertain = uncertain.to_owned();
    StackOptions::default()
        .envoy(EnvoyEdit::RouteTimeout(ROUTE_TIMEOUT))
        .policy(move |policy| {
            policy.insert("uncertain".into(), json!(uncertain));
            policy.insert("failure_cooldown_ms".into(), json!(1000));
        })
}

#[tokio::test]
async fn under_uncertain_retry_an_upstream_timeout_cools_down_then_one_retry_runs() {
    let stack = Stack::start(timing_out("retry")).await;
    let body = json!({"amount": 4});

    let first = stack.post(SLOW_PATH).key("slow").json(&body).send().await;
    assert_eq!(
        first.status, 504,
        "Envoy's own timeout answer reaches the caller: {first}"
    );
    let during = stack.post(SLOW_PATH).key("slow").json(&body).send().await;
    during.assert_problem(503, "retryable_cooldown");
    assert_eq!(stack.upstream_executions().await, 1);

    let retry = retry_while_refused(&["retryable_cooldown"], Duration::ZERO, || {
        stack.post(SLOW_PATH).key("slow").json(&body).send()
    })
    .await;
    assert_eq!(
        retry.status, 504,
        "the retry ran (and timed out again): {retry}"
    );
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_uncertain_retry_an_upstream_killed_mid_request_cools_down_then_one_retry_runs() {
    let mut stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("uncertain".into(), json!("retry"));
        policy.insert("failure_cooldown_ms".into(), json!(1000));
    }))
    .await;
    let body = json!({"amount": 5});
    let path = "/payments?hold=doomed";

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
    let during = stack.post(path).key("reset").json(&body).send().await;
    during.assert_problem(503, "retryable_cooldown");

    stack.restart_upstream().await;
    stack.open_gate("doomed").await;
    let retry = retry_while_refused(&["retryable_cooldown"], Duration::ZERO, || {
        stack.post(path).key("reset").json(&body).send()
    })
    .await;
    assert_eq!(retry.status, 201, "the retry ran: {retry}");
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "once on the new upstream"
    );
}

#[tokio::test]
async fn under_uncertain_hold_a_timeout_is_unknown_until_an_operator_resolves_it() {
    let stack = Stack::start(timing_out("hold")).await;
    let body = json!({"amount": 6});

    let first = stack.post(SLOW_PATH).key("held").json(&body).send().await;
    assert_eq!(first.status, 504, "{first}");
    for _ in 0..2 {
        let retry = stack.post(SLOW_PATH).key("held").json(&body).send().await;
        retry.assert_problem(409, "operation_unknown");
    }
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "nothing ran while unknown"
    );

    // The operator finds the record and settles it: the payment did happen.
    let listed: Value = serde_json::from_str(
        &stack
            .records_cli(&["--json", "list", "--state", "unknown"])
            .await,
    )
    .expect("records list --json prints JSON");
    let records = listed["records"].as_array().expect("a record list");
    assert_eq!(records.len(), 1, "{listed}");
    let scope = records[0]["scope"].as_str().expect("a scope").to_owned();
    let answer =
        std::env::temp_dir().join(format!("keyflight-e2e-resolve-{}.json", std::process::id()));
    std::fs::write(&answer, br#"{"payment_id":"settled-by-operator"}"#).expect("write the answer");
    stack
        .records_cli(&[
            "resolve",
            &scope,
            "--as",
            "completed",
            "--status",
            "201",
            "--header",
            "content-type: application/json",
            "--body-file",
            &answer.display().to_string(),
            "--reason",
            "e2e: the payment settled",
        ])
        .await;
    let _ = std::fs::remove_file(&answer);

    let replay = stack.post(SLOW_PATH).key("held").json(&body).send().await;
    assert_eq!(replay.status, 201, "{replay}");
    replay.assert_replayed();
    assert_eq!(replay.json()["payment_id"], "settled-by-operator");
    assert_eq!(stack.upstream_executions().await, 1);
}
