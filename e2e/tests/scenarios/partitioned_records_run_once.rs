//! Past one primary (L9, `docs/distributed-sql.md#plproxy-partitioned-postgres`): the
//! records on three Postgres partitions behind a PL/Proxy router (`make up PARTITIONS=3`),
//! two Envoys and two lease-stores in front. Every guarantee of one database holds, and a
//! partition that dies fails closed the keys it owns and only those.

use futures_util::future::join_all;
use keyflight_e2e::reply::assert_one_answer_for_all;
use keyflight_e2e::{Stack, StackOptions};
use serde_json::json;

const COPIES: usize = 32;
/// At most one stale session per connection of each store's pool, so a call fails after a
/// partition's restart no more often than the pools hold connections.
const RETRIES_AFTER_RESTART: usize = 32;

fn partitioned() -> StackOptions {
    StackOptions::default()
        .two_replicas()
        .partitioned(3)
        .policy(|policy| {
            policy.insert("follower_wait_ms".into(), json!(20_000));
        })
}

/// 32 concurrent copies of one keyed request across two Envoys run the upstream once; the
/// followers parked on either store are woken by the owning partition's `NOTIFY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_duplicates_across_two_envoys_run_once_on_a_partitioned_store() {
    let stack = Stack::start(partitioned()).await;
    let body = json!({"amount": 3200, "currency": "EUR"});
    let path = "/payments?hold=partitioned";
    let requests = join_all((0..COPIES).map(|i| {
        stack
            .post_via(i % 2, path)
            .key("partitioned-key")
            .json(&body)
            .send()
    }));
    let conductor = async {
        stack.wait_for_gate("partitioned", 1).await;
        stack
            .eventually(
                "31 followers long-polling across both lease-stores",
                || async {
                    // A worker's followers share one long-poll
                    // (`docs/stream-machine.md#herds`).
                    let waits = stack.store_metrics_at(0).await.event("follower_wait")
                        + stack.store_metrics_at(1).await.event("follower_wait");
                    let joined = stack.filter_counter_at(0, "event.herd_joined").await
                        + stack.filter_counter_at(1, "event.herd_joined").await;
                    waits + joined >= (COPIES - 1) as u64
                },
            )
            .await;
        stack.open_gate("partitioned").await;
    };
    let (replies, ()) = tokio::join!(requests, conductor);
    assert_eq!(stack.upstream_executions().await, 1);
    assert_one_answer_for_all(&replies, 201);

    // Recorded answers replay, and the key with another body is a conflict.
    let replay = stack
        .post_via(1, path)
        .key("partitioned-key")
        .json(&body)
        .send()
        .await;
    assert_eq!(replay.status, 201, "{replay}");
    let conflict = stack
        .post_via(0, path)
        .key("partitioned-key")
        .json(&json!({"amount": 1}))
        .send()
        .await;
    conflict.assert_problem(409, "idempotency_conflict");
    assert_eq!(stack.upstream_executions().await, 1);
}

/// With partition 0 down, the keys it owns are refused before the upstream (503
/// `journal_unavailable`) and every other key runs once; when it is back, the refused
/// keys run, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_partition_fails_closed_only_the_keys_it_owns() {
    let stack = Stack::start(partitioned()).await;
    let crash = stack.parts().crash_partition(0);
    let keys: Vec<String> = (0..24).map(|i| format!("outage-{i}")).collect();
    let send = |key: &str| {
        stack
            .post_via(0, "/payments")
            .key(key)
            .json(&json!({"amount": 24}))
            .send()
    };
    let mut refused = Vec::new();
    for key in &keys {
        let reply = send(key).await;
        match reply.status {
            201 => {}
            _ => {
                reply.assert_problem(503, "journal_unavailable");
                refused.push(key.clone());
            }
        }
    }
    let ran = keys.len() - refused.len();
    assert!(
        !refused.is_empty() && ran > 0,
        "partition 0 owns some of 24 keys and not all: {} refused",
        refused.len()
    );
    assert_eq!(stack.upstream_executions().await, ran as u64);

    stack.parts().recover_postgres(crash).await;
    // Each router session still holds its connection to the partition that died; PL/Proxy
    // drops it on that session's next call, which fails (503 with `Retry-After`, as before
    // the restart): a caller retries as told, and its key runs once.
    let send_as_told = |key: &str| {
        let key = key.to_owned();
        let send = &send;
        async move {
            let mut reply = send(&key).await;
            for _ in 0..RETRIES_AFTER_RESTART {
                if reply.status != 503 {
                    break;
                }
                reply.assert_problem(503, "journal_unavailable");
                reply = send(&key).await;
            }
            reply
        }
    };
    for key in &refused {
        let reply = send_as_told(key).await;
        assert_eq!(
            reply.status, 201,
            "{key} runs once its partition is back: {reply}"
        );
    }
    for key in &keys {
        let reply = send_as_told(key).await;
        assert_eq!(reply.status, 201, "{key} replays: {reply}");
    }
    assert_eq!(stack.upstream_executions().await, keys.len() as u64);
}
