//! K4 with the body-digest memo (`docs/stream-machine.md#the-body-digest-memo`): a large
//! JSON body sent again byte for byte takes its digest from the proxy's memo instead of
//! being canonicalized again, and the memo never changes what a request means. A respelled
//! body still replays, another body is still a 409, and the same bytes under another key
//! are a new request.

use keyflight_e2e::{Stack, StackOptions};

/// A JSON payment of about 48 KB (the memo takes bodies from 16 KiB), members separated by
/// `gap`: every `gap` spells the same document.
fn payment(gap: &str, amount: u32) -> String {
    let lines: Vec<String> = (0..2_000)
        .map(|i| format!("{{\"sku\":{gap}\"s-{i}\",{gap}\"qty\":{gap}1}}"))
        .collect();
    format!(
        "{{\"amount\":{gap}{amount},{gap}\"lines\":[{}]}}",
        lines.join(",")
    )
}

#[tokio::test]
async fn a_byte_identical_retry_is_matched_through_the_memo_and_means_the_same() {
    let stack = Stack::start(StackOptions::default()).await;
    let remembered = || stack.filter_counter("event.body_digest_remembered");
    let send = |key: &'static str, body: String| {
        stack
            .post("/payments")
            .key(key)
            .content_type("application/json")
            .body(body)
            .send()
    };
    let body = payment(" ", 5);
    assert!(body.len() > 40_000);

    let first = send("big", body.clone()).await;
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(remembered().await, 0, "a body seen once is canonicalized");

    let retry = send("big", body.clone()).await;
    retry.assert_replayed();
    assert_eq!((retry.status, &retry.body), (first.status, &first.body));
    assert_eq!(
        remembered().await,
        1,
        "the same bytes again come from the memo"
    );

    let respelled = send("big", payment("\n  ", 5)).await;
    respelled.assert_replayed();
    assert_eq!(
        remembered().await,
        1,
        "a respelling is canonicalized, and replays"
    );

    send("big", payment(" ", 6))
        .await
        .assert_problem(409, "idempotency_conflict");

    let other_key = send("big-2", body).await;
    assert_eq!(other_key.status, 201, "{other_key}");
    assert_eq!(other_key.header("idempotent-replayed"), None, "{other_key}");
    assert_eq!(remembered().await, 2, "the memo is by bytes, not by key");
    assert_eq!(stack.upstream_executions().await, 2);
}
