//! F6: a success larger than `max_cacheable_response_bytes` still reaches its caller whole
//! (not truncated), but the record is completed-not-replayable: a retry gets 409
//! `response_not_replayable` and does not run again.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::{Value, json};

#[tokio::test]
async fn an_answer_over_the_cap_reaches_the_caller_whole_and_retries_get_409() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("max_cacheable_response_bytes".into(), json!(1024));
    }))
    .await;
    // The demo upstream echoes the request, so the answer is as large as this.
    let note = "x".repeat(256 * 1024);
    let body = json!({"amount": 7, "note": note});

    let first = stack.post("/payments").key("big").json(&body).send().await;
    assert_eq!(first.status, 201, "{}", first.status);
    assert!(first.body.len() > 256 * 1024, "{} bytes", first.body.len());
    assert_eq!(
        first.json()["request"],
        body,
        "every byte reached the caller"
    );

    let retry = stack.post("/payments").key("big").json(&body).send().await;
    retry.assert_problem(409, "response_not_replayable");
    assert_eq!(stack.upstream_executions().await, 1);
    assert_eq!(
        stack.filter_counter("outcome.completed_uncacheable").await,
        1
    );

    let listed: Value = serde_json::from_str(&stack.records_cli(&["--json", "list"]).await)
        .expect("records list --json prints JSON");
    let record = &listed["records"][0];
    assert_eq!(
        (&record["state"], &record["replayable"]),
        (&json!("completed"), &json!(false)),
        "{listed}"
    );
}
