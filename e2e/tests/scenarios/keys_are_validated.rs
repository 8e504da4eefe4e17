//! K1: requests without a key pass unguarded unless the policy requires one; a malformed
//! key is refused before anything runs.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn requests_without_a_key_pass_unguarded() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 5});

    let first = stack.post("/payments").json(&body).send().await;
    let second = stack.post("/payments").json(&body).send().await;

    assert_eq!(
        (first.status, second.status),
        (201, 201),
        "{first}\n{second}"
    );
    assert_eq!(second.header("idempotent-replayed"), None);
    assert_eq!(stack.upstream_executions().await, 2, "each request ran");
    assert_eq!(
        stack.store_metrics().await.claims_total(),
        0,
        "nothing was claimed"
    );
    assert_eq!(stack.filter_counter("outcome.unguarded").await, 2);
}

#[tokio::test]
async fn a_policy_that_requires_a_key_refuses_requests_without_one() {
    let stack = Stack::start(StackOptions::default().policy(|policy| {
        policy.insert("require_key".into(), json!(true));
    }))
    .await;

    let reply = stack
        .post("/payments")
        .json(&json!({"amount": 5}))
        .send()
        .await;

    reply.assert_problem(400, "idempotency_key_required");
    assert_eq!(stack.upstream_executions().await, 0);
}

#[tokio::test]
async fn invalid_keys_are_refused_before_anything_runs() {
    let stack = Stack::start(StackOptions::default()).await;
    let too_long = "k".repeat(256);
    let body = json!({"amount": 5});

    let cases: [(&str, Vec<&str>); 5] = [
        ("repeated header", vec!["a", "b"]),
        ("longer than 255 bytes", vec![too_long.as_str()]),
        ("control character (tab) inside", vec!["a\tb"]),
        ("not ASCII", vec!["caf\u{e9}"]),
        ("empty", vec![""]),
    ];
    for (what, keys) in cases {
        let mut request = stack.post("/payments").json(&body);
        for key in keys {
            request = request.key(key);
        }
        let reply = request.send().await;
        assert_eq!(
            (
                reply.status,
                reply.json()["code"].as_str().map(str::to_owned)
            ),
            (400, Some("idempotency_key_invalid".to_owned())),
            "key {what}: {reply}"
        );
    }
    assert_eq!(stack.upstream_executions().await, 0);
    assert_eq!(stack.store_metrics().await.claims_total(), 0);
    assert_eq!(stack.filter_counter("outcome.rejected_invalid").await, 5);
}

#[tokio::test]
async fn edge_cases_of_valid_keys_are_accepted() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 5});

    let longest = stack
        .post("/payments")
        .key(&"k".repeat(255))
        .json(&body)
        .send()
        .await;
    assert_eq!(longest.status, 201, "a 255-byte key is valid: {longest}");

    // The IETF draft sends the key as a structured-field string: `"abc"` is the key abc.
    let quoted = stack
        .post("/payments")
        .key("\"abc\"")
        .json(&body)
        .send()
        .await;
    let bare = stack.post("/payments").key("abc").json(&body).send().await;
    assert_eq!(quoted.status, 201, "{quoted}");
    bare.assert_replayed();
    assert_eq!(stack.upstream_executions().await, 2);
}
