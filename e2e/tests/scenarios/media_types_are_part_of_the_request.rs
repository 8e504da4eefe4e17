//! K4: the media type and its parameters are part of the fingerprint. The same bytes as a
//! JSON Patch and as a JSON Merge Patch do different things, and a multipart body or a
//! text means something else under another boundary or charset: with the same key each is a
//! 409, never a replay. Spellings of one media type (case, quoting, whitespace, a
//! `charset=utf-8` on JSON) are the same request and replay. JSON is canonicalized
//! (RFC 8785) only when its charset is absent or UTF-8: under another charset the body is
//! compared byte for byte.

use keyflight_e2e::{Reply, Stack, StackOptions};

async fn send(stack: &Stack, key: &str, content_type: &str, body: &str) -> Reply {
    stack
        .post("/payments")
        .key(key)
        .content_type(content_type)
        .body(body.to_owned())
        .send()
        .await
}

#[tokio::test]
async fn another_media_type_or_parameter_with_the_same_key_is_a_conflict() {
    let stack = Stack::start(StackOptions::default()).await;
    let patch = r#"[{"op":"replace","path":"/amount","value":5}]"#;
    let cases = [
        (
            "patch",
            "application/json-patch+json",
            "application/merge-patch+json",
            patch,
        ),
        (
            "multipart",
            "multipart/form-data; boundary=aaa",
            "multipart/form-data; boundary=bbb",
            "--aaa--",
        ),
        (
            "charset",
            "text/plain; charset=utf-8",
            "text/plain; charset=iso-8859-1",
            "amount=5",
        ),
    ];
    for (key, first_type, other_type, body) in cases {
        let first = send(&stack, key, first_type, body).await;
        assert_eq!(first.status, 201, "{key}: {first}");
        send(&stack, key, other_type, body)
            .await
            .assert_problem(409, "idempotency_conflict");
    }
    assert_eq!(stack.upstream_executions().await, 3);
}

#[tokio::test]
async fn spellings_of_one_media_type_replay() {
    let stack = Stack::start(StackOptions::default()).await;

    let first = send(&stack, "json", "application/json", r#"{"amount":5}"#).await;
    let respelled = send(
        &stack,
        "json",
        "Application/JSON ; Charset=\"UTF-8\"",
        r#"{ "amount": 5.0 }"#,
    )
    .await;
    let boundary = send(
        &stack,
        "multipart",
        "multipart/form-data; boundary=aaa",
        "--aaa--",
    )
    .await;
    let quoted = send(
        &stack,
        "multipart",
        "Multipart/Form-Data;Boundary=\"aaa\"",
        "--aaa--",
    )
    .await;

    assert_eq!(
        (first.status, boundary.status),
        (201, 201),
        "{first}\n{boundary}"
    );
    respelled.assert_replayed();
    quoted.assert_replayed();
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test]
async fn json_in_another_charset_is_compared_byte_for_byte() {
    let stack = Stack::start(StackOptions::default()).await;
    let latin1 = "application/json; charset=iso-8859-1";

    let first = send(&stack, "latin1", latin1, r#"{"a":1,"b":2}"#).await;
    // The same JSON value in another member order: equal under UTF-8 JSON, not here.
    let reordered = send(&stack, "latin1", latin1, r#"{"b":2,"a":1}"#).await;
    assert_eq!(first.status, 201, "{first}");
    reordered.assert_problem(409, "idempotency_conflict");

    let utf8 = send(&stack, "utf8", "application/json", r#"{"a":1,"b":2}"#).await;
    let utf8_reordered = send(&stack, "utf8", "application/json", r#"{"b":2,"a":1}"#).await;
    assert_eq!(utf8.status, 201, "{utf8}");
    utf8_reordered.assert_replayed();
    assert_eq!(stack.upstream_executions().await, 2);
}
