//! F6: 401, 403 and 3xx answers are released unrecorded (authorization is revocable and a
//! redirect needs its context), so a retry with the same key runs again. (403 alone is also
//! in `upstream_answers_follow_the_status_matrix.rs`.)

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

#[tokio::test]
async fn a_401_403_or_302_is_released_so_the_same_request_runs_again() {
    let stack = Stack::start(StackOptions::default()).await;
    let body = json!({"amount": 3});

    for (index, status) in [401u16, 403, 302].into_iter().enumerate() {
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
    let store = stack.store_metrics().await;
    assert_eq!(store.event("finalize"), 0, "nothing was recorded");
    assert_eq!(store.event("release"), 6, "every claim was released");
    assert_eq!(stack.filter_counter("outcome.not_recorded").await, 6);
}
