//! L10: a pooled connection, or the LISTEN connection, on a node that turned read-only is
//! dropped and replaced on the node that takes writes — never reused.
//!
//! Two independent Postgres clusters stand for two nodes, both migrated; the store's URL
//! names both with `target_session_attrs=read-write`, so every connection starts on the
//! first. Then the first is fenced read-only (`default_transaction_read_only`, reloaded:
//! every open session's next transaction is read-only), as an HA manager or an operator does
//! to an old primary it is retiring. A connection closed by a failover is dropped by the
//! pool anyway; one that stays open on a read-only node would answer every write with
//! SQLSTATE 25006 for as long as it lived if it went back into the pool.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{Store, StoreError, StoreSettings};
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::eventually;
use tokio::sync::watch;

const POOL: usize = 4;

fn both(a: &PgCluster, b: &PgCluster) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        a.port(),
        b.port()
    )
}

/// Makes every session of `cluster` read-only from its next transaction on.
async fn fence_read_only(cluster: &PgCluster) {
    let admin = raw_client(&cluster.url()).await;
    // Two statements: ALTER SYSTEM may not share a transaction with anything.
    admin
        .batch_execute("ALTER SYSTEM SET default_transaction_read_only = on")
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_a_node_that_turned_read_only_are_replaced_on_the_writable_one() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    migrate_blocking(&a.url());
    migrate_blocking(&b.url());
    let url = both(&a, &b);
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&url, shutdown_rx);
    eventually(
        "the LISTEN connection is up",
        Duration::from_secs(10),
        || async { longpoll.listening() },
    )
    .await;
    let store = Store::connect(&StoreSettings {
        pool_size: POOL,
        ..settings(&url)
    })
    .await
    .unwrap();
    let req = claim_req(fingerprint("fenced"), 60_000);

    // Write on the first node, then fill the pool there: concurrent readiness checks
    // each hold a connection (concurrent claims may share one batch's connection).
    let warm = futures_util::future::join_all((0..POOL).map(|_| async {
        let scope = fresh_scope();
        must_win(&store, &scope, &req).await;
        scope
    }))
    .await;
    // Checks that overlap each open a connection; one that ends before the next starts
    // hands its connection on, so check until they have overlapped.
    eventually("the pool is full", Duration::from_secs(20), || async {
        futures_util::future::join_all((0..POOL).map(|_| store.readiness()))
            .await
            .into_iter()
            .for_each(|ready| ready.unwrap());
        store.pool_status().size == POOL
    })
    .await;
    let on_a = raw_client(&a.url()).await;
    assert!(row_state(&on_a, &warm[0]).await.is_some(), "written on a");

    fence_read_only(&a).await;
    // Each pooled connection may answer read-only once; then it is gone, and its
    // replacement skips the read-only node. Had they gone back into the pool, every claim
    // would fail for good. (A session that has not yet processed the reload still writes on
    // the first node: the reload reaches each session asynchronously.)
    let on_b = raw_client(&b.url()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut refused, mut on_b_in_a_row) = (0, 0);
    while on_b_in_a_row < 2 * POOL {
        assert!(
            Instant::now() < deadline,
            "claims never moved to the writable node"
        );
        let scope = fresh_scope();
        match store.claim(&scope, &req).await {
            Ok(_) if row_state(&on_b, &scope).await.is_some() => on_b_in_a_row += 1,
            Ok(_) => on_b_in_a_row = 0,
            Err(StoreError::ReadOnly(message)) => {
                assert!(message.starts_with("25006"), "{message}");
                refused += 1;
                on_b_in_a_row = 0;
            }
            Err(other) => panic!("unexpected: {other}"),
        }
        assert!(
            refused <= POOL,
            "a read-only connection was reused ({refused} refusals, pool of {POOL})"
        );
    }
    assert!(refused >= 1, "the fence was never seen");

    // The listener was on the first node too; it finds out at its next liveness check and
    // moves, so a follower parked now is woken by a finalize on the writable node long
    // before its wait runs out (the lease has a minute left).
    let waited = fresh_scope();
    let waiting = ClaimRequest {
        wait_ms: Some(30_000),
        ..claim_req(fingerprint("fenced-wait"), 60_000)
    };
    let (claim_id, _, _) = must_win(&store, &waited, &waiting).await;
    let follower = {
        let (store, longpoll, waiting) = (store.clone(), longpoll.clone(), waiting.clone());
        tokio::spawn(async move { claim_with_wait(&store, &longpoll, &waited, &waiting).await })
    };
    eventually("the follower parked", Duration::from_secs(10), || async {
        longpoll.waiting() == 1
    })
    .await;
    let finalized_at = Instant::now();
    store
        .finalize(&waited, finalize_ok(claim_id))
        .await
        .unwrap();
    let answer = follower.await.unwrap().unwrap();
    assert_eq!(
        answer,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    assert!(
        finalized_at.elapsed() < Duration::from_secs(12),
        "the follower waited {:?}: the listener stayed on the read-only node",
        finalized_at.elapsed()
    );
}
