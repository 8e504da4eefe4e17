//! The `keyflight send` client command against the demo stack: it generates and reports
//! a key, reuses it on retries of a 503 with `Retry-After`, and maps answers to exit codes
//! (0 success, 2 invalid input, 4 conflict, 5 unavailable), printing problem details as JSON.

use std::process::Output;

use keyflight_e2e::stack::DEFAULT_USER;
use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::binaries;
use serde_json::{Value, json};

/// Runs `keyflight send POST URL ARGS…` as the demo's principal; returns (exit code, report).
async fn send(url: &str, args: &[&str]) -> (i32, Value) {
    let output = tokio::process::Command::new(binaries::client())
        .args(["send", "POST", url, "-H"])
        .arg(format!("x-user: {DEFAULT_USER}"))
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run keyflight: {e}"));
    report(output)
}

fn report(output: Output) -> (i32, Value) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "keyflight printed no JSON report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let code = output
        .status
        .code()
        .unwrap_or_else(|| panic!("keyflight was killed: {report}"));
    (code, report)
}

#[tokio::test]
async fn a_generated_key_is_reported_and_reused_as_the_operation_id() {
    let stack = Stack::start(StackOptions::default()).await;
    let url = stack.url("/payments");
    let body = json!({"amount": 12}).to_string();

    let (code, first) = send(&url, &["--data", &body]).await;
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["status"], 201, "{first}");
    assert_eq!(first["replayed"], false);
    assert_eq!(first["operation_id_generated"], true);
    let key = first["operation_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        key.len(),
        36,
        "a generated key is a UUID (122 random bits): {key}"
    );

    let (code, again) = send(&url, &["--data", &body, "--operation-id", &key]).await;
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["body"], first["body"], "the recorded answer");
    assert_eq!(again["operation_id"], key.as_str());
    assert_eq!(stack.upstream_executions().await, 1);

    let other = json!({"amount": 13}).to_string();
    let (code, conflict) = send(&url, &["--data", &other, "--key", &key]).await;
    assert_eq!(code, 4, "{conflict}");
    assert_eq!(conflict["outcome"], "conflict");
    assert_eq!(conflict["status"], 409);
    assert_eq!(
        conflict["problem"]["code"], "idempotency_conflict",
        "{conflict}"
    );
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn invalid_input_exits_2_with_the_problem() {
    let stack = Stack::start(StackOptions::default()).await;
    let url = stack.url("/payments");
    // The demo policy buffers at most 1 MiB of request body.
    let file =
        std::env::temp_dir().join(format!("keyflight-client-big-{}.json", std::process::id()));
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(1_200_000));
    std::fs::write(&file, big).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));

    let (code, too_large) = send(&url, &["--data", &format!("@{}", file.display())]).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 2, "{too_large}");
    assert_eq!(too_large["status"], 413);
    assert_eq!(
        too_large["problem"]["code"], "payload_too_large",
        "{too_large}"
    );

    let (code, bad_key) = send(&url, &["--data", "{}", "--key", "not\u{7f}visible"]).await;
    assert_eq!(code, 2, "{bad_key}");
    assert_eq!(bad_key["attempts"], 0, "refused before sending: {bad_key}");
    assert_eq!(stack.upstream_executions().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_with_retry_after_is_retried_with_the_same_key_until_it_replays() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(200));
    }))
    .await;
    let path = "/payments?hold=held";
    let body = json!({"amount": 30});

    let winner = stack.post(path).key("op-held").json(&body).send();
    let client_side = async {
        stack.wait_for_gate("held", 1).await;
        let client = tokio::process::Command::new(binaries::client())
            .args(["send", "POST", &stack.url(path), "-H"])
            .arg(format!("x-user: {DEFAULT_USER}"))
            .args(["--data", &body.to_string(), "--key", "op-held"])
            .output();
        let gate = async {
            // The client's first attempt has been answered 503 request_in_progress.
            stack
                .eventually("the client got 503 request_in_progress", || async {
                    stack.filter_counter("outcome.in_progress_timeout").await >= 1
                })
                .await;
            stack.open_gate("held").await;
        };
        let (output, ()) = tokio::join!(client, gate);
        report(output.unwrap_or_else(|e| panic!("run keyflight: {e}")))
    };
    let (winner, (code, client)) = tokio::join!(winner, client_side);

    assert_eq!(winner.status, 201, "{winner}");
    assert_eq!(code, 0, "{client}");
    assert_eq!(client["replayed"], true, "{client}");
    assert!(
        client["attempts"].as_u64() >= Some(2),
        "retried after the 503: {client}"
    );
    assert_eq!(client["operation_id"], "op-held");
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn an_unavailable_store_exits_5_after_the_retries() {
    let mut stack = Stack::start(StackOptions::default()).await;
    stack.stop_lease_store();

    let (code, unavailable) = send(
        &stack.url("/payments"),
        &["--data", "{}", "--retries", "1", "--key", "op-down"],
    )
    .await;

    assert_eq!(code, 5, "{unavailable}");
    assert_eq!(unavailable["attempts"], 2, "one retry: {unavailable}");
    assert_eq!(unavailable["status"], 503);
    assert_eq!(
        unavailable["problem"]["code"], "journal_unavailable",
        "{unavailable}"
    );
    assert_eq!(stack.upstream_executions().await, 0);
}
