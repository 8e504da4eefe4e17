//! F6 (`docs/stream-machine.md#response-side`): 401, 403 and the redirects that say nothing
//! ran are released unrecorded (authorization is revocable; a 302 or 307 may send the client
//! to a login page, a 301 or 308 to where the resource moved), so a retry with the same key
//! runs again. A `303 See Other` is POST-redirect-GET's answer to an operation that completed
//! — the demo upstream created a payment and points at it — so it is recorded and replayed,
//! `location` included, and the retry never runs the payment again. (403 alone is also in
//! `upstream_answers_follow_the_status_matrix.rs`.)

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_401_403_302_or_307_is_released_so_the_same_request_runs_again() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 3});

    for (index, status) in [401u16, 403, 302, 307].into_iter().enumerate() {
        let path = format!("/payments?status={status}");
        let key = format!("unrecorded-{status}");
        let first = stack.post(&path).key(&key).json(&body).send().await;
        let retry = stack.post(&path).key(&key).json(&body).send().await;

        assert_eq!(
            (first.status, retry.status),
            (status, status),
            "{first}\n{retry}"
        );
        assert_eq!(retry.header("idempotent-replayed"), None, "{retry}");
        assert_ne!(retry.body, first.body, "the retry ran: a fresh payment");
        assert_eq!(stack.upstream_executions().await, 2 * (index as u64 + 1));
    }
    // The filter answers while its release goes out: the last one may still be in flight.
    stack
        .eventually("every claim was released", || async {
            stack.store_metrics().await.event("release") == 8
        })
        .await;
    let store = stack.store_metrics().await;
    assert_eq!(store.event("finalize"), 0, "nothing was recorded");
    assert_eq!(store.event("release"), 8, "and nothing else");
    assert_eq!(stack.filter_counter("outcome.not_recorded").await, 8);
}

/// Hole 3 of issue 19: a 303 used to be forgotten like any 3xx, and the retry created a
/// second payment.
#[tokio::test]
async fn a_303_after_a_post_is_recorded_and_replayed_with_its_location() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 303});
    let path = "/payments?status=303";

    let first = stack.post(path).key("see-other").json(&body).send().await;
    let retry = stack.post(path).key("see-other").json(&body).send().await;

    assert_eq!(first.status, 303, "{first}");
    let location = first.header("location").expect("the upstream's location");
    assert!(location.starts_with("/payments/"), "{first}");
    assert_eq!(retry.status, 303, "{retry}");
    retry.assert_replayed();
    assert_eq!(retry.header("location"), Some(location), "{retry}");
    assert_eq!(retry.body, first.body);
    assert_eq!(stack.upstream_executions().await, 1, "the payment ran once");
    assert_eq!(stack.store_metrics().await.event("finalize"), 1);
}
