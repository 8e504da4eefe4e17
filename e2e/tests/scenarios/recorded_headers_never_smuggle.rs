//! F8 through real Envoy: what is recorded never smuggles a header into a replay.
//!
//! The store refuses a finalize whose headers break the recorded-header rule, and the
//! filter never sends one. But a record can reach the table some other way (an older
//! store, an operator editing a row). This scenario writes such a record straight into
//! Postgres and replays it through Envoy: a value with CR LF (response splitting), a
//! control character and a `set-cookie` must all stay out of the reply, while the rest
//! of the recorded answer is replayed as usual.

use keyflight_e2e::{Stack, StackOptions};
use serde_json::{Value, json};

#[tokio::test]
async fn a_tampered_record_replays_without_its_bad_headers() {
    // The replay must come from the store's answer, not from this proxy's edge cache.
    let stack = Stack::start(StackOptions::default().policy(|p| {
        p.insert("edge_cache".into(), Value::Bool(false));
    }))
    .await;
    let body = json!({"amount": 5});

    let first = stack
        .post("/payments")
        .key("smuggle-1")
        .json(&body)
        .send()
        .await;
    assert_eq!(first.status, 201, "{first}");
    assert!(
        first.has_header("set-cookie"),
        "the upstream sets a cookie: {first}"
    );
    let recorded = stack.sql("SELECT response_headers::text FROM keyflight_records");
    assert!(
        recorded.contains("content-type") && !recorded.contains("set-cookie"),
        "the filter recorded only allowlisted headers: {recorded}"
    );

    // Rewrite the record's headers as no store of this release would accept them.
    // (jsonb cannot hold NUL, so a NUL can never come back from the store at all.)
    stack.sql(
        r#"UPDATE keyflight_records SET response_headers =
             '[["location", "/payments/1\r\nset-cookie: stolen=1"],
               ["set-cookie", "victim=1"],
               ["etag", "\"v1\u0001\""],
               ["x bad", "v"],
               ["content-type", "application/json"]]'::jsonb
           WHERE state = 'completed'"#,
    );

    let replay = stack
        .post("/payments")
        .key("smuggle-1")
        .json(&body)
        .send()
        .await;

    assert_eq!(replay.status, 201, "{replay}");
    replay.assert_replayed();
    assert_eq!(replay.body, first.body, "the recorded body is replayed");
    assert_eq!(replay.header("content-type"), Some("application/json"));
    for absent in ["set-cookie", "location", "etag", "x bad"] {
        assert!(
            !replay.has_header(absent),
            "{absent} breaks the rule and is dropped: {replay}"
        );
    }
    assert_eq!(stack.upstream_executions().await, 1);
}
