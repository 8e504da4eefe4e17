//! F5, issue 48 item 9: a herd of same-key, same-body callers — more than the lease-store
//! parks on one scope — waits through one Envoy: each worker's followers share one
//! long-poll, so every caller gets the winner's answer and none is refused
//! (`docs/stream-machine.md#herds`). The member whose call the long-poll is may leave: the
//! others still get the answer, on both adapters.

use futures_util::future::join_all;
use keyflight_e2e::raw_http::Held;
use keyflight_e2e::reply::assert_one_answer_for_all;
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

/// Above the lease-store's 256 long-polls per scope, and the 1,001 of issue 48's check:
/// hundreds per worker, answered over several root-context callbacks.
const CALLERS: usize = 1001;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn herds_wait_on_one_long_poll() {
    // Followers may wait long: the test, not a timer, decides when the winner finishes. The
    // store's calls may take longer than the demo's 1 s while 1,001 callers arrive on a
    // machine that runs other scenarios at once (a claim answered after it was seen failed
    // 504 here): this scenario is about herds, not about the store's timeout.
    let stack = Stack::start(
        StackOptions::default()
            .policy(|policy| {
                policy.insert("follower_wait_ms".into(), json!(20_000));
            })
            .plugin(|plugin| plugin["lease_store"]["timeout_ms"] = json!(4_000)),
    )
    .await;
    let body = json!({"amount": 1001, "currency": "EUR"});
    let path = "/payments?hold=herd";

    let requests =
        join_all((0..CALLERS).map(|_| stack.post(path).key("herd-key").json(&body).send()));
    let conductor = async {
        stack.wait_for_gate("herd", 1).await;
        // Every follower is accounted for: parked at the store, sharing a worker's
        // long-poll, or (as before the fix) refused.
        stack
            .eventually("every follower waits or was answered", || async {
                let parked = stack.store_metrics().await.event("follower_wait");
                let joined = stack.filter_counter("event.herd_joined").await;
                let refused = stack.filter_counter("outcome.in_progress_timeout").await
                    + stack.filter_counter("outcome.journal_unavailable").await;
                parked + joined + refused >= (CALLERS - 1) as u64
            })
            .await;
        assert_eq!(
            stack.upstream_executions().await,
            1,
            "only the winner reaches the upstream while it holds the lease"
        );
        stack.open_gate("herd").await;
    };
    let (replies, ()) = tokio::join!(requests, conductor);

    assert_eq!(stack.upstream_executions().await, 1);
    assert_one_answer_for_all(&replies, 201);
    assert_eq!(stack.filter_counter("outcome.won_completed").await, 1);
    assert_eq!(
        stack.filter_counter("outcome.replay").await,
        (CALLERS - 1) as u64
    );
    assert_eq!(stack.store_metrics().await.event("claimed"), 1);
}

/// A herd's long-poll is one member's call; that member's client leaving must not fail the
/// wait of the members that joined it. Under the native adapter the call goes out as that
/// member's callout, which Envoy cancels with its stream, so the call is handed to another
/// live stream of the worker (`filter-native/README.md#coalesced-calls`). Every member
/// must be on one worker: each worker has its own herds.
async fn a_member_that_leaves_fails_no_other(options: StackOptions) {
    let stack = Stack::start(options.policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(20_000));
    }))
    .await;
    let body = json!({"amount": 47, "currency": "EUR"}).to_string();
    let (winner, _) = posted_on(&stack, &body, None).await;
    stack.wait_for_gate("leaving", 1).await;
    let (sender, worker) = posted_on(&stack, &body, None).await;
    stack
        .eventually(
            "the first follower's long-poll is parked at the store",
            || async { stack.store_metrics().await.event("follower_wait") >= 1 },
        )
        .await;
    let (member, _) = posted_on(&stack, &body, Some(worker)).await;
    stack
        .eventually(
            "the second follower joined the first one's long-poll",
            || async { stack.filter_counter("event.herd_joined").await == 1 },
        )
        .await;

    drop(sender);
    stack
        .eventually(
            "Envoy ended the stream of the follower that left",
            || async { stack.envoy_stat("http.edge.downstream_rq_active").await <= 2 },
        )
        .await;
    stack.open_gate("leaving").await;
    let (winner, member) = tokio::join!(winner.answer(), member.answer());

    assert_eq!(winner.status, 201, "{winner:?}");
    assert_eq!(
        member.status, 201,
        "the member that stayed replays: {member:?}"
    );
    assert_eq!(member.body, winner.body);
    assert_eq!(stack.upstream_executions().await, 1);
    assert_eq!(stack.filter_counter("outcome.journal_unavailable").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_leaves_fails_no_other_member() {
    a_member_that_leaves_fails_no_other(StackOptions::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_leaves_fails_no_other_member_under_the_native_adapter() {
    a_member_that_leaves_fails_no_other(StackOptions::default().native_adapter()).await;
}

/// A request of the scenario's key posted in full on a new connection, and the Envoy
/// worker that accepted it (`listener.<address>.worker_<n>.downstream_cx_total`; a stack's
/// Envoy runs two). With `worker` given, connections are opened (and dropped) until one
/// lands on it.
async fn posted_on(stack: &Stack, body: &str, worker: Option<usize>) -> (Held, usize) {
    let port = stack.listener_port(0);
    let accepted = |n: usize| format!("listener.127.0.0.1_{port}.worker_{n}.downstream_cx_total");
    let headers = [
        ("x-user", "alice"),
        ("content-type", "application/json"),
        ("idempotency-key", "leaving-member"),
    ];
    loop {
        let before = stack.envoy_stat(&accepted(0)).await;
        let before_total = before + stack.envoy_stat(&accepted(1)).await;
        let mut held = Held::post(port, "/payments?hold=leaving", &headers, body.as_bytes()).await;
        stack
            .eventually("Envoy accepted the connection", || async {
                stack.envoy_stat(&accepted(0)).await + stack.envoy_stat(&accepted(1)).await
                    > before_total
            })
            .await;
        let on = usize::from(stack.envoy_stat(&accepted(0)).await == before);
        if worker.is_none_or(|worker| worker == on) {
            held.finish().await;
            return (held, on);
        }
    }
}
