//! F7, F8: once a keyed request has completed, a retry gets the recorded answer, marked as a
//! replay, with only allowlisted headers, and nothing runs or is written again.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_retry_after_completion_replays_without_running_or_writing() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 100, "currency": "EUR"});

    let first = stack
        .post("/payments")
        .key("pay-1")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(first.header("idempotent-replayed"), None, "{first}");
    let fence = first.json()["fence"].clone();
    assert!(
        fence.is_string(),
        "the upstream got an idempotency-fence: {first}"
    );
    let before = stack.store_metrics().await;
    assert_eq!(before.event("finalize"), 1, "the first answer was recorded");

    let retry = stack
        .post("/payments")
        .key("pay-1")
        .json(&body)
        .send()
        .await;

    assert_eq!(retry.status, 201, "{retry}");
    retry.assert_replayed();
    assert_eq!(retry.body, first.body, "the recorded body, byte for byte");
    assert_eq!(stack.upstream_executions().await, 1);
    let after = stack.store_metrics().await;
    for event in ["claimed", "finalize", "renew", "release"] {
        assert_eq!(
            after.event(event),
            before.event(event),
            "a replay writes nothing to the store (event `{event}`)"
        );
    }
}

#[tokio::test]
async fn a_replay_carries_allowlisted_headers_and_never_set_cookie() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 7});

    let first = stack
        .post("/payments")
        .key("pay-2")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 201, "{first}");
    // The upstream sends these; the test below is only meaningful if it did.
    for header in [
        "content-type",
        "location",
        "set-cookie",
        "x-upstream-execution",
    ] {
        assert!(
            first.has_header(header),
            "the original answer has {header}: {first}"
        );
    }

    let replay = stack
        .post("/payments")
        .key("pay-2")
        .json(&body)
        .send()
        .await;

    replay.assert_replayed();
    assert_eq!(replay.header("content-type"), first.header("content-type"));
    assert_eq!(replay.header("location"), first.header("location"));
    assert!(
        !replay.has_header("set-cookie"),
        "set-cookie is never replayed: {replay}"
    );
    assert!(
        !replay.has_header("x-upstream-execution"),
        "headers outside the allowlist are not replayed: {replay}"
    );
}

#[tokio::test]
async fn a_non_json_body_is_guarded_and_replayed_as_well() {
    let stack = Stack::start(StackOptions::default()).await;

    let first = stack
        .post("/payments")
        .key("raw-1")
        .content_type("application/octet-stream")
        .body(b"\x00\x01 not json".to_vec())
        .send()
        .await;
    let retry = stack
        .post("/payments")
        .key("raw-1")
        .content_type("application/octet-stream")
        .body(b"\x00\x01 not json".to_vec())
        .send()
        .await;

    assert_eq!(first.status, 201, "{first}");
    retry.assert_replayed();
    assert_eq!(retry.body, first.body);
    assert_eq!(stack.upstream_executions().await, 1);
}

/// A replay from the store travels as a frame: the recorded body as raw bytes after the
/// answer's JSON, not base64 (`docs/records.md#the-recorded-body-as-bytes`). A gzipped
/// answer (bytes of every value, newlines among them) replays byte for byte, each time.
#[tokio::test]
async fn a_replay_from_the_store_arrives_as_raw_bytes() {
    // The replays must come from the store, not from this proxy's edge cache.
    let stack = Stack::start(StackOptions::default().policy(|p| {
        p.insert("edge_cache".into(), serde_json::Value::Bool(false));
    }))
    .await;
    let pay = || {
        stack
            .post("/payments?gzip=always")
            .key("framed-1")
            .header("accept-encoding", "gzip")
            .json(&json!({"amount": 3}))
            .send()
    };
    let first = pay().await;
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(first.header("content-encoding"), Some("gzip"), "{first}");
    assert!(
        first.body.iter().any(|&b| !b.is_ascii()),
        "the recorded body is binary: {first}"
    );

    for replays in 1..=2 {
        let replay = pay().await;
        replay.assert_replayed();
        assert_eq!(replay.body, first.body, "the recorded body, byte for byte");
        let metrics = stack.store_metrics().await;
        assert_eq!(
            metrics.get("keyflight_store_framed_answers_total"),
            f64::from(replays),
            "the store sent the replay as a frame"
        );
    }
    assert_eq!(stack.upstream_executions().await, 1);
}
