//! The claims a worker's streams make in one event-loop turn reach the lease-store as one
//! batch, and each request still runs once with its own answer
//! (`docs/stream-machine.md#coalesced-calls`). Run on the newest and the oldest supported
//! Envoy: what it shows is `docs/envoy-facts.md#waking-the-root-context`; and under the
//! native adapter, whose worker turn is a stream's scheduled event
//! (`filter-native/README.md#coalesced-calls`).

use futures_util::future::join_all;
use keyflight_e2e::raw_http::Held;
use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::binaries::Binaries;
use keyflight_testkit::process::Signal;

const CALLERS: usize = 16;

const BATCHED: &str = r#"keyflight_store_request_duration_seconds_count{route="/v1/batch/claims"}"#;
const ALONE: &str = r#"keyflight_store_request_duration_seconds_count{route="/v1/claims/{scope}"}"#;

async fn one_turns_claims_go_as_one_batch(options: StackOptions) {
    let stack = Stack::start(options).await;
    let port = stack.listener_port(0);
    let mut held = Vec::new();
    for caller in 0..CALLERS {
        let key = format!("coalesced-{caller}");
        let headers = [
            ("x-user", "alice"),
            ("content-type", "application/json"),
            ("idempotency-key", key.as_str()),
        ];
        let body = format!(r#"{{"caller":{caller}}}"#);
        held.push(Held::post(port, "/payments", &headers, body.as_bytes()).await);
    }
    stack
        .eventually(
            "Envoy holds every request, waiting for its body",
            || async { stack.envoy_stat("http.edge.downstream_rq_active").await == CALLERS as u64 },
        )
        .await;
    // Frozen, Envoy reads none of the last bytes as they arrive: on waking, each worker
    // finds its requests' bodies complete in one turn.
    stack.parts().signal_envoy(0, Signal::Stop);
    for request in &mut held {
        request.finish().await;
    }
    stack.parts().signal_envoy(0, Signal::Cont);
    let replies = join_all(held.into_iter().map(Held::answer)).await;

    for reply in &replies {
        assert_eq!(reply.status, 201, "{reply:?}");
    }
    assert_eq!(stack.upstream_executions().await, CALLERS as u64);
    let metrics = stack.store_metrics().await;
    assert_eq!(metrics.event("claimed"), CALLERS as u64, "every claim won");
    let (batched, alone) = (metrics.get(BATCHED), metrics.get(ALONE));
    assert!(
        batched >= 1.0,
        "the turn's claims went as a batch: {batched} batches"
    );
    assert!(
        batched + alone < CALLERS as f64,
        "fewer claim exchanges than claims: {batched} batches, {alone} alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turns_claims_go_as_one_batch_on_envoy_1_40() {
    one_turns_claims_go_as_one_batch(StackOptions::default().binaries(Binaries::locate())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turns_claims_go_as_one_batch_on_envoy_1_36() {
    let oldest = Binaries::locate().with_oldest_envoy();
    one_turns_claims_go_as_one_batch(StackOptions::default().binaries(oldest)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turns_claims_go_as_one_batch_under_the_native_adapter() {
    one_turns_claims_go_as_one_batch(StackOptions::default().native_adapter()).await;
}
