//! L2, F4, F7: a winner that cannot renew (its proxy is frozen with SIGSTOP: a stalled node
//! or a long pause) loses its lease; a same-body request through the other replica takes the
//! operation over (`recovered_abandoned`). When the old winner's proxy resumes and its
//! answer comes, its writes are fenced off (`lease_lost` at the store, `lease_stolen` in the
//! filter): the new owner's record stays intact, and the old caller still gets its response.
//!
//! (Freezing a lease-store would not do: every Envoy reaches every lease-store, so renewals
//! move to the other replica; `frozen_lease_stores_are_routed_around` proves that.)

use keyflight_e2e::{Stack, StackOptions};
use keyflight_testkit::process::Signal;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winner_paused_past_its_lease_is_fenced_and_the_new_owners_record_stands() {
    // A short lease needs a short call timeout: a renew must be able to time out and be
    // retried within it (`docs/record-outbox.md#renewal`).
    let stack = Stack::start(
        StackOptions::default()
            .two_replicas()
            .plugin(|plugin| plugin["lease_store"]["timeout_ms"] = json!(500))
            .policy(|policy| {
                policy.insert("lease_ms".into(), json!(2000));
                policy.insert("follower_wait_ms".into(), json!(20_000));
                // The at-least-once takeover this proves is `uncertain: retry`'s; the default
                // holds (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
                policy.insert("uncertain".into(), json!("retry"));
            }),
    )
    .await;
    let body = json!({"amount": 12});
    let path = "/payments?hold=fence";

    let old = stack.post_via(0, path).key("fenced").json(&body).send();
    let takeover = async {
        stack.wait_for_gate("fence", 1).await;
        // The old winner's proxy hangs: it renews nothing and the lease runs out.
        stack.signal_envoy(0, Signal::Stop);
        // Through the other replica the same request waits for the lease, then takes it.
        let new = stack.post_via(1, path).key("fenced").json(&body).send();
        let release = async {
            stack.wait_for_gate("fence", 2).await;
            let recovered = stack.store_event_total("recovered_abandoned").await;
            stack.signal_envoy(0, Signal::Cont);
            assert_eq!(recovered, 1);
            stack.open_gate("fence").await;
        };
        let (new, ()) = tokio::join!(new, release);
        new
    };
    let (old, new) = tokio::join!(old, takeover);

    assert_eq!((old.status, new.status), (201, 201), "{old}\n{new}");
    assert_eq!(
        old.header("idempotent-replayed"),
        None,
        "the old caller got its own answer"
    );
    assert_eq!(
        new.header("idempotent-replayed"),
        None,
        "the new owner ran: {new}"
    );
    let (old_fence, new_fence) = (fence(&old), fence(&new));
    assert!(
        new_fence > old_fence,
        "fences increase: {old_fence} then {new_fence}"
    );

    assert!(
        stack.store_event_total("lease_lost").await >= 1,
        "the old winner's late write was refused"
    );
    assert!(
        stack.filter_counter_at(0, "event.lease_stolen").await >= 1,
        "the old winner's filter counted the stolen lease"
    );
    // The record is the new owner's.
    let retry = stack
        .post_via(0, path)
        .key("fenced")
        .json(&body)
        .send()
        .await;
    retry.assert_replayed();
    assert_eq!(
        retry.body, new.body,
        "the record holds the new owner's answer"
    );
    assert_eq!(stack.upstream_executions().await, 2);
}

/// The `idempotency-fence` the upstream got, as the demo upstream echoes it.
fn fence(reply: &keyflight_e2e::Reply) -> u64 {
    let fence = &reply.json()["fence"];
    fence
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("no numeric fence in {reply}"))
}
