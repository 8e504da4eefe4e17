//! L10 end to end: the primary's Postgres node dies while a guarded request is in flight,
//! and nothing is lost. Real Envoy with the real `.wasm`, the lease-store on a replicated
//! Postgres (etcd + two Patroni nodes, synchronous mode; its multi-host URL with
//! `target_session_attrs=read-write`), the demo upstream.
//!
//! The upstream holds the request at a gate; the primary's node is killed (agent, postmaster
//! and every server process at once); while no primary takes writes, a new guarded request
//! fails closed; the gate opens and the caller gets its answer, whose finalize fails and
//! passes to the record outbox; Patroni promotes the synchronous standby, the lease-store
//! follows it without a restart, the outbox lands the record, and a same-key retry replays.
//! The claim was acknowledged before the failover, so synchronous replication had it on the
//! standby: without that, the new primary would not know the key and the retry would run
//! the payment again.
//!
//! The failover window (first refused to first accepted claim at the lease-store) is printed.
//! Patroni's `ttl` is 6 s in tests (`keyflight_testkit::ha`), so the whole test takes about
//! half a minute, most of it the cluster's start-up.

use std::io::Write as _;
use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

/// Longest a failover may take here.
const FAILOVER: Duration = Duration::from_secs(60);

/// Pacing of the window probe.
const PROBE_PACE: Duration = Duration::from_millis(50);

/// When the lease-store first refused a claim after the kill, and when it first took one again.
struct Window {
    first_refused: Instant,
    first_accepted: Instant,
}

/// Probes the lease-store with fresh claims until one is accepted after at least one refusal.
async fn measure_window(stack: &Stack, killed_at: Instant) -> Window {
    let mut first_refused = None;
    loop {
        assert!(
            killed_at.elapsed() < FAILOVER,
            "the lease-store took no claim within {FAILOVER:?} of the primary's death"
        );
        match (stack.probe_store_claim().await, first_refused) {
            (200, Some(first_refused)) => {
                return Window {
                    first_refused,
                    first_accepted: Instant::now(),
                };
            }
            (200, None) => {}
            (503, None) => first_refused = Some(Instant::now()),
            (503, Some(_)) => {}
            (other, _) => panic!("a claim probe answered {other}"),
        }
        tokio::time::sleep(PROBE_PACE).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_dies_mid_request_loses_nothing_and_the_retry_replays() {
    let stack = Stack::start(StackOptions::default().replicated_postgres()).await;
    let body = json!({"amount": 4200});
    let path = "/payments?hold=failover";

    let caller = stack.post(path).key("failover").json(&body).send();
    let fault = async {
        stack.wait_for_gate("failover", 1).await;
        let killed_at = Instant::now();
        let old_leader = stack.ha().kill_primary_node().await;

        // No primary: a new guarded request fails closed and never reaches the upstream.
        let during = stack
            .post("/payments")
            .key("during-the-window")
            .json(&json!({"amount": 1}))
            .send()
            .await;
        during.assert_problem(503, "journal_unavailable");
        assert_eq!(
            stack.upstream_executions().await,
            1,
            "only the held request ran"
        );

        // The upstream answers now; the record cannot be written yet.
        stack.open_gate("failover").await;
        let window = measure_window(&stack, killed_at).await;
        (killed_at, old_leader, window)
    };
    let (first, (killed_at, old_leader, window)) = tokio::join!(caller, fault);
    assert_eq!(first.status, 201, "the caller gets its answer: {first}");

    let new_leader = stack.ha().leader().await;
    assert!(new_leader.is_some_and(|leader| leader != old_leader));
    let _ = writeln!(
        std::io::stderr(),
        "postgres failover window at the lease-store (first 503 to first accepted claim): {} ms; \
         kill to first accepted claim: {} ms",
        window
            .first_accepted
            .duration_since(window.first_refused)
            .as_millis(),
        window.first_accepted.duration_since(killed_at).as_millis()
    );

    // The outbox lands the record on the new primary.
    stack
        .eventually("the outbox delivered the record", || async {
            stack.filter_counter("outbox.delivered").await == 1
        })
        .await;

    let retry = stack.post(path).key("failover").json(&body).send().await;
    assert_eq!(retry.status, 201, "{retry}");
    retry.assert_replayed();
    assert_eq!(retry.json(), first.json(), "the answer the caller got");
    assert_eq!(stack.upstream_executions().await, 1, "ran once");
    assert_eq!(stack.store_metrics().await.event("recovered_abandoned"), 0);
}
