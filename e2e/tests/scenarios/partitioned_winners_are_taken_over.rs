//! The partition row of the guarantee (`docs/guarantee.md#where-it-is-at-least-once`), with
//! real kernel faults: each Envoy and lease-store runs in its own network namespace, and the
//! winner's Envoy is cut off from every lease-store (nftables drops, both ways) while the
//! stores and Postgres stay healthy. Its caller still gets the answer (the finalize fails,
//! the record waits in the outbox), its lease runs out, and one same-body retry through the
//! other Envoy takes the expired lease over and runs again (`recovered_abandoned`). Once
//! the link heals, the outbox's late record is refused `lease_lost` and counted
//! (`keyflight.outbox.lost`); the taker's record is the one that replays.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions, retry_while_refused};
use keyflight_testkit::stack::NetFault;
use serde_json::json;

const LEASE_MS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winner_partitioned_past_its_lease_is_taken_over_and_its_late_record_is_refused() {
    let stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .own_networks()
            .policy(|policy| {
                policy.insert("lease_ms".into(), json!(LEASE_MS));
                policy.insert("follower_wait_ms".into(), json!(0));
                // The at-least-once takeover this proves is `uncertain: retry`'s; the default
                // holds (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
                policy.insert("uncertain".into(), json!("retry"));
            }),
    )
    .await;
    let body = json!({"amount": 77});
    let path = "/payments?hold=partition";

    // The winner enters through Envoy 0 and reaches the upstream; then its proxy is cut
    // off from every lease-store, and only then does the upstream answer.
    let winner = stack.post_via(0, path).key("cut").json(&body).send();
    let cut = async {
        stack.wait_for_gate("partition", 1).await;
        let cut = stack.parts().cut(NetFault::ProxyPartition { envoy: 0 });
        stack.open_gate("partition").await;
        (cut, Instant::now())
    };
    let (winner, (cut, cut_at)) = tokio::join!(winner, cut);
    assert_eq!(
        winner.status, 201,
        "the answer is delivered while its record waits: {winner}"
    );
    assert_eq!(stack.upstream_executions().await, 1);

    // The stores and Postgres are healthy: the other proxy still claims and records.
    let unrelated = stack
        .post_via(1, "/payments")
        .key("other")
        .json(&body)
        .send()
        .await;
    assert_eq!(unrelated.status, 201, "{unrelated}");
    assert_eq!(stack.upstream_executions().await, 2);

    // Past the lease (renewals stopped at the cut), the same request through Envoy 1
    // takes the lease over and runs again.
    tokio::time::sleep_until((cut_at + Duration::from_millis(LEASE_MS)).into()).await;
    let retry = retry_while_refused(&["request_in_progress"], Duration::ZERO, || {
        stack.post_via(1, path).key("cut").json(&body).send()
    })
    .await;
    assert_eq!(retry.status, 201, "{retry}");
    assert_eq!(retry.header("idempotent-replayed"), None, "it ran: {retry}");
    assert_ne!(
        retry.body, winner.body,
        "a second execution, a second answer"
    );
    assert_eq!(stack.upstream_executions().await, 3);
    assert_eq!(stack.store_event_total("recovered_abandoned").await, 1);
    assert_eq!(stack.filter_counter_at(0, "outbox.lost").await, 0);

    // Healed: the winner's outbox delivers its record late and is refused.
    stack.parts().heal(cut);
    stack
        .eventually("the late record got lease_lost", || async {
            stack.filter_counter_at(0, "outbox.lost").await == 1
        })
        .await;
    assert!(stack.store_event_total("lease_lost").await >= 1);

    // The taker's record is the one both proxies replay; nothing runs again. A call of
    // Envoy 0's may still ride a connect its worker began during the cut and fail with it
    // (docs/envoy-facts.md#callouts): that answer is `journal_unavailable`, which ran
    // nothing, and a caller sends the request again, as this one does.
    for envoy in [0, 1] {
        let again = retry_while_refused(&["journal_unavailable"], Duration::ZERO, || {
            stack.post_via(envoy, path).key("cut").json(&body).send()
        })
        .await;
        again.assert_replayed();
        assert_eq!(again.body, retry.body, "Envoy {envoy}");
    }
    assert_eq!(stack.upstream_executions().await, 3);
}
