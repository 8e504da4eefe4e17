//! Issue 47: the native adapter (`filter-native/`, an Envoy dynamic module) drives the same
//! decisions as the Wasm filter: the core scenarios, run against it, end the same way. And
//! a panic inside the module answers 503 `journal_unavailable`, counted, while Envoy keeps
//! serving (`filter-native/README.md#panics`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use keyflight_e2e::reply::assert_one_answer_for_all;
use keyflight_e2e::stack::{EnvoyStart, envoy_alone_as};
use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::envoy_variants::EnvoyEdit;
use serde_json::json;

/// The request header that makes the `test-panic` build of the module panic.
const TEST_PANIC_HEADER: &str = "x-keyflight-test-panic";

fn native() -> StackOptions {
    StackOptions::default().native_adapter()
}

/// The ABI version `filter-native/src/abi.rs` declares (`ABI_VERSION: … = c"…"`).
fn declared_abi_version() -> String {
    let path = keyflight_testkit::binaries::workspace_root().join("filter-native/src/abi.rs");
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let line = source
        .lines()
        .find(|line| line.starts_with("pub const ABI_VERSION"))
        .unwrap_or_else(|| panic!("no ABI_VERSION in {}", path.display()));
    line.split('"')
        .nth(1)
        .unwrap_or_else(|| panic!("no version string in `{line}`"))
        .to_owned()
}

#[tokio::test]
async fn the_loaded_envoy_speaks_the_abi_version_the_module_declares() {
    let stack = Stack::start(native()).await;
    let declared = declared_abi_version();
    let log = stack.envoy_log();
    assert!(
        log.contains(&format!("Dynamic module ABI version {declared} matched.")),
        "Envoy did not match the module's ABI version {declared}: rebuild filter-native's \
         declarations from the abi.h of this Envoy (filter-native/README.md#the-abi); its log:\n{}",
        log.lines()
            .filter(|line| line.contains("dynamic_modules"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A principal source the native host cannot read (a JWT claim, on Envoy 1.40) would find
/// nothing and give the request another scope than the Wasm filter does: Envoy refuses to
/// start with a line naming it (`filter-native/README.md#not-yet-equal`).
#[tokio::test]
async fn a_jwt_claim_principal_is_refused_at_start() {
    let options = native().plugin(|plugin| {
        plugin["identity"] = json!({
            "principal": [{"jwt_claim": {"metadata_key": "jwt_payload", "claim": "sub"}}],
        });
    });
    match envoy_alone_as(options).await {
        EnvoyStart::Exited { status, log } => {
            assert!(!status.success(), "Envoy exited successfully; log:\n{log}");
            assert!(
                log.lines().any(|line| line.contains(
                    "keyflight: invalid plugin configuration: identity.principal[0].jwt_claim: \
                     the native adapter cannot read a JWT claim"
                )),
                "log:\n{log}"
            );
        }
        EnvoyStart::Ready { log } => {
            panic!("Envoy started with a JWT-claim principal it cannot read; log:\n{log}")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_run_the_upstream_once() {
    const COPIES: usize = 8;
    let stack = Stack::start(native().policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(20_000));
    }))
    .await;
    let body = json!({"amount": 4200, "currency": "EUR"});
    let path = "/payments?hold=burst";

    let requests =
        join_all((0..COPIES).map(|_| stack.post(path).key("burst-key").json(&body).send()));
    let conductor = async {
        stack.wait_for_gate("burst", 1).await;
        stack
            .eventually("every follower waits", || async {
                // Parked at the store, or sharing its worker's long-poll (a herd).
                let parked = stack.store_metrics().await.event("follower_wait");
                let joined = stack.filter_counter("event.herd_joined").await;
                parked + joined >= (COPIES - 1) as u64
            })
            .await;
        assert_eq!(stack.upstream_executions().await, 1);
        stack.open_gate("burst").await;
    };
    let (replies, ()) = tokio::join!(requests, conductor);

    assert_eq!(stack.upstream_executions().await, 1);
    assert_one_answer_for_all(&replies, 201);
    assert_eq!(stack.filter_counter("outcome.won_completed").await, 1);
    assert_eq!(
        stack.filter_counter("outcome.replay").await,
        (COPIES - 1) as u64
    );
    let metrics = stack.store_metrics().await;
    assert_eq!(metrics.event("claimed"), 1);
    assert_eq!(metrics.event("finalize"), 1);
}

#[tokio::test]
async fn a_completed_request_replays_and_another_body_conflicts() {
    let stack = Stack::start(native()).await;
    let body = json!({"amount": 100});

    let first = stack.post("/payments").key("k").json(&body).send().await;
    let again = stack.post("/payments").key("k").json(&body).send().await;
    let other = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 999}))
        .send()
        .await;

    assert_eq!(first.status, 201, "{first}");
    again.assert_replayed();
    assert_eq!(again.body, first.body);
    other.assert_problem(409, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
    assert_eq!(stack.filter_counter("outcome.replay").await, 1);
    assert_eq!(stack.filter_counter("outcome.conflict").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_past_its_wait_gets_503_then_a_retry_replays() {
    let stack = Stack::start(native().policy(|policy| {
        policy.insert("follower_wait_ms".into(), json!(300));
    }))
    .await;
    let body = json!({"amount": 50});
    let path = "/payments?hold=slow";

    let winner = stack.post(path).key("k").json(&body).send();
    let follower_side = async {
        stack.wait_for_gate("slow", 1).await;
        let follower = stack.post(path).key("k").json(&body).send().await;
        follower.assert_problem(503, "request_in_progress");
        assert!(follower.retry_after_s() >= 1, "{follower}");
        assert_eq!(stack.upstream_executions().await, 1);
        stack.open_gate("slow").await;
    };
    let (winner, ()) = tokio::join!(winner, follower_side);
    assert_eq!(winner.status, 201, "{winner}");

    let retry = stack.post(path).key("k").json(&body).send().await;

    retry.assert_replayed();
    assert_eq!(retry.body, winner.body);
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn with_the_lease_store_down_nothing_is_dispatched() {
    let mut stack = Stack::start(native()).await;
    stack.stop_lease_store();

    let guarded = stack
        .post("/payments")
        .key("k")
        .json(&json!({"amount": 1}))
        .send()
        .await;
    let unguarded = stack
        .post("/payments")
        .json(&json!({"amount": 1}))
        .send()
        .await;

    guarded.assert_problem(503, "journal_unavailable");
    assert!(guarded.retry_after_s() >= 1, "{guarded}");
    assert_eq!(stack.filter_counter("outcome.journal_unavailable").await, 1);
    assert_eq!(unguarded.status, 201, "{unguarded}");
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "only the unguarded one ran"
    );
}

#[tokio::test]
async fn a_module_panic_answers_503_and_envoy_keeps_serving() {
    let stack = Stack::start(native()).await;
    let body = json!({"amount": 7});

    let panicked = stack
        .post("/payments")
        .key("k")
        .header(TEST_PANIC_HEADER, "1")
        .json(&body)
        .send()
        .await;
    let next = stack.post("/payments").key("k").json(&body).send().await;

    panicked.assert_problem(503, "journal_unavailable");
    assert_eq!(stack.filter_counter("outcome.journal_unavailable").await, 1);
    assert_eq!(next.status, 201, "{next}");
    assert_eq!(
        stack.upstream_executions().await,
        1,
        "the panicked request never ran"
    );
}

#[tokio::test]
async fn a_stream_the_module_could_not_make_is_refused_not_forwarded() {
    // A `test-panic` build panics making every stream under a policy named so. Envoy 1.40
    // answers such a stream 500 itself; were it to run the stream's hooks without the
    // module's filter, the barrier would answer 503 (`barrier.rs`). Either way nothing is
    // forwarded.
    let stack = Stack::start(native().policy(|policy| {
        policy.insert("name".into(), json!("test-panic-on-new"));
    }))
    .await;
    let body = json!({"amount": 9});

    let refused = stack.post("/payments").key("k").json(&body).send().await;
    let again = stack.post("/payments").key("k").json(&body).send().await;

    for answer in [&refused, &again] {
        assert!(answer.status >= 500, "refused, not served: {answer}");
    }
    assert_eq!(
        stack.upstream_executions().await,
        0,
        "no request went upstream unguarded"
    );
}

#[tokio::test]
async fn a_panic_in_a_workers_tick_fails_its_streams_closed() {
    // A `test-panic` build panics in every tick of a worker's root driver under a policy
    // named so. That worker's outbox and renewals stop, so from then on its streams are
    // answered 503 and never forwarded, as a failed Wasm VM's are (`worker.rs`). A worker
    // gets its root driver with its first stream, so requests go on until one is refused
    // without running; one the tick failed while it ran upstream is answered 503 too.
    let stack = Stack::start(native().policy(|policy| {
        policy.insert("name".into(), json!("test-panic-on-tick"));
    }))
    .await;
    let sent = AtomicU64::new(0);

    stack
        .eventually(
            "a request on a worker whose tick panicked is refused, not forwarded",
            || async {
                let ran_before = stack.upstream_executions().await;
                let key = format!("k{}", sent.fetch_add(1, Ordering::Relaxed));
                let reply = stack
                    .post("/payments")
                    .key(&key)
                    .json(&json!({"amount": 6}))
                    .send()
                    .await;
                if reply.status != 503 {
                    assert_eq!(reply.status, 201, "{reply}");
                    return false;
                }
                reply.assert_problem(503, "journal_unavailable");
                stack.upstream_executions().await == ran_before
            },
        )
        .await;

    assert!(
        stack
            .envoy_log()
            .contains("panic in a worker's root driver"),
        "the panic is logged"
    );
    assert!(stack.filter_counter("outcome.journal_unavailable").await >= 1);
}

#[tokio::test]
async fn a_module_panic_after_its_stream_ended_is_only_logged() {
    let stack = Stack::start(native()).await;
    let body = json!({"amount": 8});

    let first = stack
        .post("/payments")
        .key("k")
        .header(TEST_PANIC_HEADER, "complete")
        .json(&body)
        .send()
        .await;
    stack
        .eventually("the panic at the stream's end is logged", || async {
            stack
                .envoy_log()
                .contains("panic in the native module after its stream ended")
        })
        .await;
    let replay = stack.post("/payments").key("k").json(&body).send().await;

    assert_eq!(first.status, 201, "{first}");
    replay.assert_replayed();
    assert_eq!(stack.upstream_executions().await, 1);
}

/// Envoy times the upstream out and answers 504 itself: the filter tells that answer from
/// the upstream's by the properties it reads (`docs/envoy-facts.md#who-produced-a-response`),
/// so under `uncertain: hold` the record is `unknown` and a retry is refused. Read wrong,
/// the 504 would pass for the upstream's own and cool down instead.
async fn an_envoy_timeout_is_held_as_unknown(options: StackOptions) {
    let stack = Stack::start(
        options
            .envoy(EnvoyEdit::RouteTimeout(Duration::from_millis(300)))
            .policy(|policy| {
                policy.insert("uncertain".into(), json!("hold"));
            }),
    )
    .await;
    let body = json!({"amount": 3});
    let path = "/payments?delay_ms=1500";

    let first = stack.post(path).key("k").json(&body).send().await;
    let retry = stack.post(path).key("k").json(&body).send().await;

    assert_eq!(first.status, 504, "Envoy's own timeout answer: {first}");
    retry.assert_problem(409, "operation_unknown");
    assert_eq!(stack.upstream_executions().await, 1);
}

#[tokio::test]
async fn an_envoy_timeout_is_held_as_unknown_under_the_native_adapter() {
    an_envoy_timeout_is_held_as_unknown(native()).await;
}

#[tokio::test]
async fn an_envoy_timeout_is_held_as_unknown_under_the_wasm_filter() {
    an_envoy_timeout_is_held_as_unknown(StackOptions::default()).await;
}
