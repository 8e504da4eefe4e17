//! F9: no edge serves an erased record beyond the stated bound. Edges cache completed
//! records; an operator's `lease-store records erase` bumps the store's operator epoch in
//! the same transaction, every worker asks for the epoch every third of
//! `edge_cache.max_staleness_ms`, and serves an entry only under the epoch it was cached
//! under — so at most `max_staleness_ms` after the erase the edge stops replaying it and
//! the next retry runs again, although the entry's `ttl_s` (here 60 s) is far from over.
//! A worker that cannot reach the store stops serving from its cache after the same bound.

use std::time::{Duration, Instant};

use keyflight_e2e::{Reply, Stack, StackOptions};
use serde_json::json;

const MAX_STALENESS: Duration = Duration::from_millis(1500);

fn options() -> StackOptions {
    StackOptions::default().plugin(|plugin| {
        plugin["edge_cache"] = json!({
            "ttl_s": 60,
            "max_staleness_ms": u64::try_from(MAX_STALENESS.as_millis()).unwrap_or(u64::MAX),
        });
    })
}

async fn pay(stack: &Stack) -> Reply {
    stack
        .post("/payments")
        .key("erase-me")
        .json(&json!({"amount": 3}))
        .send()
        .await
}

/// Replays until one is served from the edge cache.
async fn warm_the_edge_cache(stack: &Stack) {
    stack
        .eventually("a replay served from the edge cache", || async {
            let before = stack.filter_counter("outcome.replay_edge_cache").await;
            let replay = pay(stack).await;
            replay.assert_replayed();
            stack.filter_counter("outcome.replay_edge_cache").await > before
        })
        .await;
}

#[tokio::test]
async fn an_erased_record_is_not_replayed_from_the_edge_beyond_max_staleness() {
    let stack = Stack::start(options()).await;
    let first = pay(&stack).await;
    assert_eq!(first.status, 201, "{first}");
    warm_the_edge_cache(&stack).await;

    let listed = stack.records_cli(&["list", "--state", "completed"]).await;
    let scope = listed
        .lines()
        .find_map(|line| line.split_whitespace().next().filter(|s| s.len() == 64))
        .unwrap_or_else(|| panic!("no completed record listed:\n{listed}"))
        .to_owned();
    stack
        .records_cli(&[
            "erase",
            &scope,
            "--i-understand-replay-risk",
            "--reason",
            "e2e: erased to check edge staleness",
        ])
        .await;
    // After the CLI returned the erase has committed: whatever is served later than
    // MAX_STALENESS from here is served later than that from the erase.
    let erased_at = Instant::now();

    let mut stale_hits = 0;
    let rerun = loop {
        let sent_at = erased_at.elapsed();
        let hits = stack.filter_counter("outcome.replay_edge_cache").await;
        let reply = pay(&stack).await;
        if stack.filter_counter("outcome.replay_edge_cache").await > hits {
            assert!(
                sent_at < MAX_STALENESS,
                "an edge replayed the erased record {sent_at:?} after the erase"
            );
            stale_hits += 1;
        } else {
            break reply;
        }
        assert!(erased_at.elapsed() < MAX_STALENESS * 4, "still replaying");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(rerun.status, 201, "{rerun}");
    assert_eq!(
        rerun.header("idempotent-replayed"),
        None,
        "the retry ran again: {rerun}"
    );
    assert_ne!(rerun.body, first.body, "a new payment");
    assert_eq!(stack.upstream_executions().await, 2);
    eprintln!("edge replays of the erased record within the bound: {stale_hits}");
}

#[tokio::test]
async fn an_edge_that_cannot_ask_the_store_stops_serving_its_cache() {
    let mut stack = Stack::start(options()).await;
    assert_eq!(pay(&stack).await.status, 201);
    warm_the_edge_cache(&stack).await;

    stack.stop_lease_store();
    let stopped_at = Instant::now();
    let refused = loop {
        let sent_at = stopped_at.elapsed();
        let hits = stack.filter_counter("outcome.replay_edge_cache").await;
        let reply = pay(&stack).await;
        if stack.filter_counter("outcome.replay_edge_cache").await > hits {
            assert!(
                sent_at < MAX_STALENESS,
                "served from the cache {sent_at:?} after the store went away"
            );
        } else {
            break reply;
        }
        assert!(stopped_at.elapsed() < MAX_STALENESS * 4, "still serving");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Without the store nothing can be claimed either: fail closed.
    refused.assert_problem(503, "journal_unavailable");
    assert_eq!(stack.upstream_executions().await, 1);
}
