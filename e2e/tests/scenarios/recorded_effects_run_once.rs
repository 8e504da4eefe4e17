//! A service that records its effect with `keyflight-effects` (`docs/effects.md`) makes a
//! guarded operation exactly-once where keyflight alone is at-least-once: the winning proxy
//! killed after the service committed, or a caller that hung up under `uncertain: retry`,
//! let a same-body retry run the operation again (with a higher fence), and the service
//! answers that re-run with the first run's committed answer instead of paying twice. The
//! service trusts the scope and fence because only the filter can set them.

use std::time::{Duration, Instant};

use keyflight_e2e::stack::Post;
use keyflight_e2e::{Reply, Stack, StackOptions, retry_while_refused};
use serde_json::{Value, json};

const LEASE_MS: u64 = 3000;

/// Entry `execution` (1-based) of the upstream's execution log.
async fn logged(stack: &Stack, execution: usize) -> Value {
    stack.upstream_execution_log().await[execution - 1].clone()
}

/// The fence a logged execution ran under.
fn fence_of(entry: &Value) -> u64 {
    entry["fence"]
        .as_str()
        .and_then(|fence| fence.parse().ok())
        .unwrap_or_else(|| panic!("no fence: {entry}"))
}

/// The re-run's answer is the first run's, byte for byte what the service committed: the
/// same payment, the first execution's number and fence.
fn assert_first_runs_answer(retry: &Reply, first: &Value) {
    assert_eq!(retry.status, 201, "{retry}");
    assert_eq!(retry.json()["execution"], json!(1), "{retry}");
    assert_eq!(retry.json()["fence"], first["fence"], "{retry}");
    assert_eq!(
        retry.header("idempotent-replayed"),
        None,
        "keyflight forwarded the retry; the service answered it: {retry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_winners_proxy_died_gets_the_answer_the_service_committed() {
    let stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .upstream_effects()
            .policy(|policy| {
                policy.insert("lease_ms".into(), json!(LEASE_MS));
                policy.insert("follower_wait_ms".into(), json!(0));
                // The re-run the service's own record answers is `uncertain: retry`'s; the
                // default holds the key instead (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
                policy.insert("uncertain".into(), json!("retry"));
            }),
    )
    .await;
    let body = json!({"amount": 70});
    let path = "/payments?hold_committed=paid";

    // The winner's payment commits; then its proxy dies before the answer is recorded.
    let winner = stack.post_via(0, path).key("paid").json(&body).try_send();
    let crash = async {
        stack.wait_for_gate("paid", 1).await;
        assert_eq!(stack.upstream_payments().await, 1, "the payment committed");
        stack.kill_envoy(0);
        Instant::now()
    };
    let (winner, killed_at) = tokio::join!(winner, crash);
    assert!(winner.is_err(), "the caller lost its proxy: {winner:?}");
    stack.open_gate("paid").await;

    // Past the dead proxy's lease, one same-body retry takes the operation over and runs.
    tokio::time::sleep_until((killed_at + Duration::from_millis(LEASE_MS + 300)).into()).await;
    let retry = retry_while_refused(&["request_in_progress"], Duration::ZERO, || {
        stack.post_via(1, path).key("paid").json(&body).send()
    })
    .await;
    let first = logged(&stack, 1).await;
    assert_first_runs_answer(&retry, &first);
    assert_eq!(stack.upstream_executions().await, 2, "the retry ran");
    assert!(
        fence_of(&logged(&stack, 2).await) > fence_of(&first),
        "under a higher fence"
    );
    assert_eq!(stack.upstream_payments().await, 1, "and paid nothing");
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 1);

    // keyflight recorded that answer: the next retry is a replay.
    let again = stack.post_via(1, path).key("paid").json(&body).send().await;
    again.assert_replayed();
    assert_eq!(again.body, retry.body);
    assert_eq!(stack.upstream_executions().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_caller_hung_up_under_uncertain_retry_gets_the_answer_the_service_committed()
 {
    let stack = Stack::start(StackOptions::default().upstream_effects().policy(|policy| {
        policy.insert("uncertain".into(), json!("retry"));
        policy.insert("failure_cooldown_ms".into(), json!(1000));
    }))
    .await;
    let body = json!({"amount": 71});
    let path = "/payments?hold_committed=gone";

    // The payment commits, and the caller hangs up before it is answered: an uncertain
    // outcome, which `uncertain: retry` releases for one retry after the cooldown.
    let caller = stack
        .post(path)
        .key("gave-up")
        .json(&body)
        .timeout(Duration::from_millis(300))
        .try_send();
    let (caller, ()) = tokio::join!(caller, stack.wait_for_gate("gone", 1));
    assert!(caller.is_err(), "the caller timed out and hung up");
    assert_eq!(stack.upstream_payments().await, 1, "the payment committed");
    // Envoy must see the caller gone before the service answers: a busy Envoy that reads
    // the hang-up only after the answer came back records that answer, and the retry is
    // then a replay, not the re-run this scenario is about.
    stack
        .eventually("the filter saw the caller hang up", || async {
            stack.filter_counter("event.caller_gone").await >= 1
        })
        .await;
    stack.open_gate("gone").await;

    let retry = retry_while_refused(&["retryable_cooldown"], Duration::ZERO, || {
        stack.post(path).key("gave-up").json(&body).send()
    })
    .await;
    assert_first_runs_answer(&retry, &logged(&stack, 1).await);
    assert_eq!(stack.upstream_executions().await, 2, "the retry ran");
    assert_eq!(stack.upstream_payments().await, 1, "and paid nothing");
}

/// A fence no claim of a fresh stack gets.
const FORGED_FENCE: &str = "999999";

/// `post` with a caller's own scope and fence headers.
fn forged<'a>(post: Post<'a>, scope: &str) -> Post<'a> {
    post.header("idempotency-scope", scope)
        .header("idempotency-fence", FORGED_FENCE)
}

#[tokio::test]
async fn a_callers_scope_and_fence_never_reach_the_service() {
    let stack = Stack::start(StackOptions::default().upstream_effects()).await;
    let forged_scope = "f".repeat(64);

    // Guarded: the service gets the claim's scope and fence, and records under them.
    let guarded = forged(stack.post("/payments").key("forged"), &forged_scope)
        .json(&json!({"amount": 72}))
        .send()
        .await;
    assert_eq!(guarded.status, 201, "{guarded}");
    let entry = logged(&stack, 1).await;
    let scope = entry["scope"].as_str().unwrap_or_default();
    assert_eq!(scope.len(), 64, "{entry}");
    assert_ne!(scope, forged_scope, "{entry}");
    assert_ne!(entry["fence"], FORGED_FENCE, "{entry}");

    // Unguarded (no key): the service gets neither, so it records nothing under them.
    let unguarded = forged(stack.post("/payments"), &forged_scope)
        .json(&json!({"amount": 73}))
        .send()
        .await;
    assert_eq!(unguarded.status, 201, "{unguarded}");
    let entry = logged(&stack, 2).await;
    assert_eq!(
        (&entry["scope"], &entry["fence"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(stack.upstream_payments().await, 2);
}
