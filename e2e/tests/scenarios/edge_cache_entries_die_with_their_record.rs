//! F9, L5 (`docs/stream-machine.md#the-edge-cache`): an edge-cache entry is served no longer
//! than its record lives. The store counts a record's retention from its claim; an entry's
//! lifetime is bounded by what the store says is left of it, counted from before the store
//! was asked. So once the retention is over, every proxy sends the request to the store,
//! which runs it again (`recovered_ttl`) — no proxy keeps replaying an answer the store has
//! forgotten.
//!
//! Hole 4 of issue 19: the lifetime counted from when the entry was cached, so a proxy that
//! cached a replay late in the record's retention replayed it for up to a whole TTL (capped
//! by the retention) after the store had forgotten it.

use std::time::{Duration, Instant};

use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

const RETENTION_S: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_cached_late_in_its_records_retention_is_not_served_past_it() {
    let stack = Stack::start(StackOptions::default().two_replicas().policy(|policy| {
        policy.insert("retention_s".into(), json!(RETENTION_S));
        // A retention may not be shorter than the lease (`docs/records.md#retention-and-cleanup`).
        policy.insert("lease_ms".into(), json!(RETENTION_S * 1000));
    }))
    .await;
    let body = json!({"amount": 4});
    let path = "/payments";

    let claimed_at = Instant::now();
    let first = stack.post_via(0, path).key("late").json(&body).send().await;
    assert_eq!(first.status, 201, "{first}");

    // Late in the record's retention, the other proxy replays it from the store and caches
    // it there (paced by the clock: the retention is what is under test).
    while claimed_at.elapsed() < Duration::from_millis(2500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cached = stack.post_via(1, path).key("late").json(&body).send().await;
    cached.assert_replayed();
    assert_eq!(cached.body, first.body);

    // From then on that proxy replays from its cache until the record's retention is over;
    // within a couple of seconds after it, the same request runs again. (Counted from the
    // write, the entry would live until 2.5 s + 3 s.)
    let deadline = claimed_at + Duration::from_millis(RETENTION_S * 1000 + 1500);
    loop {
        let retry = stack.post_via(1, path).key("late").json(&body).send().await;
        assert_eq!(retry.status, 201, "{retry}");
        if retry.header("idempotent-replayed").is_none() {
            break;
        }
        assert_eq!(retry.body, first.body, "a replay is the record");
        assert!(
            Instant::now() < deadline,
            "proxy 1 still replays the record {:?} after its claim, past its {RETENTION_S} s \
             retention",
            claimed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stack.upstream_executions().await, 2);
    assert_eq!(stack.store_event_total("recovered_ttl").await, 1);
}
