//! F4, L9: every Envoy reaches every lease-store replica, so a replica that hangs (SIGSTOP:
//! connections accepted, nothing answered) costs a running winner at most one renewal. The
//! cluster's health check and outlier detection take the frozen replica out of rotation,
//! the next renewals land on the other one, and the lease outlives the freeze: a same-body
//! request meanwhile is told the request is in progress instead of taking the operation
//! over, and the upstream runs once.
//!
//! With each Envoy wired to one lease-store (as the shipped two-replica config once was),
//! every renewal of the winner would go to the frozen replica and the lease would run out.

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::process::Signal;
use serde_json::json;

const LEASE_MS: u64 = 3000;
/// Seven renewals per lease, the longest interval the filter accepts with its 1 s call
/// timeout: a renew that hangs for the whole timeout can be retried within the lease, and a
/// renew does not wait for one still hanging (`docs/record-outbox.md#renewal`).
const RENEW_MS: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_lease_store_is_routed_around_and_the_winner_keeps_its_lease() {
    let stack = Stack::start(StackOptions::default().two_replicas().policy(|policy| {
        policy.insert("lease_ms".into(), json!(LEASE_MS));
        policy.insert("renew_interval_ms".into(), json!(RENEW_MS));
        policy.insert("follower_wait_ms".into(), json!(0));
    }))
    .await;
    let body = json!({"amount": 500});
    let path = "/payments?hold=frozen";

    let winner = stack.post_via(0, path).key("frozen").json(&body).send();
    let freeze = async {
        stack.wait_for_gate("frozen", 1).await;
        stack.signal_lease_store(0, Signal::Stop);
        // Renewals answered by the live replica after the freeze, for more than a lease.
        let renewed = stack.store_metrics_at(1).await.event("renew");
        let past_one_lease = renewed + 2 * LEASE_MS / RENEW_MS;
        stack
            .eventually(
                "the winner's renewals reach the live lease-store for more than a lease",
                || async { stack.store_metrics_at(1).await.event("renew") >= past_one_lease },
            )
            .await;
        let retry = stack
            .post_via(1, path)
            .key("frozen")
            .json(&body)
            .send()
            .await;
        let executions = stack.upstream_executions().await;
        stack.signal_lease_store(0, Signal::Cont);
        retry.assert_problem(503, "request_in_progress");
        assert_eq!(
            executions, 1,
            "the lease held: nothing took the operation over"
        );
        stack.open_gate("frozen").await;
    };
    let (winner, ()) = tokio::join!(winner, freeze);

    assert_eq!(winner.status, 201, "{winner}");
    assert_eq!(winner.header("idempotent-replayed"), None, "{winner}");
    let replay = stack
        .post_via(1, path)
        .key("frozen")
        .json(&body)
        .send()
        .await;
    replay.assert_replayed();
    assert_eq!(replay.body, winner.body);
    assert_eq!(stack.upstream_executions().await, 1);
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 0);
}
