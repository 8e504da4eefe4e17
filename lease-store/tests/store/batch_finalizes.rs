//! Group commit of finalizes against a real Postgres: finalizes queued
//! together run as one statement, a repeat and a lost lease among them get
//! the single path's answers, watched records still wake their followers,
//! and large bodies batch only within the byte budget.
//!
//! Calls queue without sleeping: the store has ONE finalize worker; a gate
//! transaction holds a row lock on a pending record, and a finalize of that
//! record occupies the worker (the test sees its lock wait in
//! `pg_stat_activity`); finalizes made then wait in the queue (`batch_queued`)
//! until the gate commits.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{BatchKind, BatchTotals, MAX_BATCH_BYTES, Store, StoreError};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, FinalizeRequest, StoredResponse};
use keyflight_testkit::pg::wait_for_lock_waits;
use keyflight_testkit::process::eventually;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

type Finalized = JoinHandle<Result<(), StoreError>>;

/// A finalize worker held on a row lock, until [`Gate::open`].
struct Gate {
    db: tokio_postgres::Client,
    held: Finalized,
}

impl Gate {
    /// Occupies `store`'s finalize worker: a finalize of a record a transaction has locked.
    async fn hold(store: &Store, app: &str) -> Gate {
        let scope = fresh_scope();
        let (claim_id, _, _) =
            must_win(store, &scope, &claim_req(fingerprint("gate"), 30_000)).await;
        let db = lock_record(&scope).await;
        let held = spawn_finalize(store, scope, finalize_ok(claim_id));
        let watcher = raw_client(&cluster().url()).await;
        wait_for_lock_waits(&watcher, app, 1).await;
        Gate { db, held }
    }

    /// Releases the lock: the held finalize lands, and the worker moves on.
    async fn open(self) {
        self.db.batch_execute("COMMIT").await.unwrap();
        self.held.await.unwrap().unwrap();
    }
}

fn spawn_finalize(store: &Store, scope: Digest, request: FinalizeRequest) -> Finalized {
    let store = store.clone();
    tokio::spawn(async move { store.finalize(&scope, request).await })
}

/// The record's state, claim id and recorded body.
async fn recorded(db: &tokio_postgres::Client, scope: &Digest) -> (String, Uuid, Option<Vec<u8>>) {
    let row = db
        .query_one(
            "SELECT state, claim_id, response_body FROM keyflight_records WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalize_batch_lands_fresh_records_accepts_a_repeat_refuses_a_lost_lease_and_wakes_followers()
 {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    let req = claim_req(fingerprint("finalize batch"), 30_000);
    let mut fresh = Vec::new();
    for _ in 0..8 {
        let scope = fresh_scope();
        let (claim_id, _, _) = must_win(&store, &scope, &req).await;
        fresh.push((scope, claim_id));
    }
    // A finalize that already landed, sent again (the outbox never saw its answer).
    let repeated = fresh_scope();
    let (repeat_id, _, _) = must_win(&store, &repeated, &req).await;
    store
        .finalize(&repeated, finalize_ok(repeat_id))
        .await
        .unwrap();
    // A winner whose lease ran out and was taken over.
    let stolen = fresh_scope();
    let short = claim_req(fingerprint("finalize batch"), 200);
    let (lost_id, _, _) = must_win(&store, &stolen, &short).await;
    wait_for_lease_expiry(&db, &stolen).await;
    let (thief_id, _, _) = must_win(&store, &stolen, &req).await;

    // Followers long-poll two of the fresh records: only the batch's NOTIFY wakes them
    // before their wait (and the winners' leases) run out, half a minute from now.
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&cluster().url(), shutdown_rx);
    eventually(
        "the LISTEN connection is up",
        Duration::from_secs(10),
        || async { longpoll.listening() },
    )
    .await;
    let followers: Vec<_> = fresh[..2]
        .iter()
        .map(|(scope, _)| {
            let (store, longpoll, scope) = (store.clone(), longpoll.clone(), *scope);
            let waiting = ClaimRequest {
                wait_ms: Some(30_000),
                ..req.clone()
            };
            tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &waiting).await })
        })
        .collect();
    eventually("two followers parked", Duration::from_secs(10), || async {
        longpoll.waiting() == 2
    })
    .await;

    let before = store.batch_sizes().totals(BatchKind::Finalize);
    let gate = Gate::hold(&store, &app).await;
    let landing: Vec<_> = fresh
        .iter()
        .map(|(scope, claim_id)| spawn_finalize(&store, *scope, finalize_ok(*claim_id)))
        .collect();
    let repeat = spawn_finalize(&store, repeated, finalize_ok(repeat_id));
    let lost = spawn_finalize(&store, stolen, finalize_ok(lost_id));
    wait_for_queued(&store, BatchKind::Finalize, 10).await;
    let opened = std::time::Instant::now();
    gate.open().await;

    for task in landing {
        task.await.unwrap().unwrap();
    }
    repeat.await.unwrap().unwrap();
    assert!(matches!(lost.await.unwrap(), Err(StoreError::LeaseLost)));
    for (scope, claim_id) in &fresh {
        assert_eq!(
            recorded(&db, scope).await,
            ("completed".into(), *claim_id, Some(sample_response().body))
        );
    }
    assert_eq!(
        recorded(&db, &stolen).await,
        ("pending".into(), thief_id, None)
    );
    for follower in followers {
        let answer = tokio::time::timeout(Duration::from_secs(10), follower)
            .await
            .expect("a follower woke")
            .unwrap()
            .unwrap();
        assert_eq!(
            answer,
            ClaimResponse::Completed {
                response: sample_response()
            }
        );
    }
    assert!(opened.elapsed() < Duration::from_secs(10));
    let after = store.batch_sizes().totals(BatchKind::Finalize);
    assert_eq!(
        (after.batches - before.batches, after.calls - before.calls),
        (2, 11),
        "the gate's finalize alone, then the ten queued behind it as one batch"
    );
    assert_eq!(after.largest, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_share_a_batch_only_within_the_byte_budget_and_are_recorded_whole() {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    // Three of these exceed the budget; two fit.
    let size = MAX_BATCH_BYTES * 3 / 8;
    let req = claim_req(fingerprint("large"), 30_000);
    let mut records = Vec::new();
    for i in 0..4u8 {
        let scope = fresh_scope();
        let (claim_id, _, _) = must_win(&store, &scope, &req).await;
        let body: Vec<u8> = (0..size).map(|n| (n % 251) as u8 ^ i).collect();
        records.push((scope, claim_id, body));
    }
    let gate = Gate::hold(&store, &app).await;
    let tasks: Vec<_> = records
        .iter()
        .map(|(scope, claim_id, body)| {
            let request = FinalizeRequest {
                claim_id: *claim_id,
                response: StoredResponse::new(200, Vec::new(), body),
                replayable: true,
                previous_scope: None,
            };
            spawn_finalize(&store, *scope, request)
        })
        .collect();
    wait_for_queued(&store, BatchKind::Finalize, 4).await;
    gate.open().await;
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for (scope, claim_id, body) in &records {
        assert_eq!(
            recorded(&db, scope).await,
            ("completed".into(), *claim_id, Some(body.clone()))
        );
    }
    assert_eq!(
        store.batch_sizes().totals(BatchKind::Finalize),
        BatchTotals {
            batches: 3,
            calls: 5,
            largest: 2
        },
        "the gate alone, then two and two"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalize_batch_that_deadlocks_runs_its_calls_singly_instead_of_failing_them() {
    let (store, app) = one_worker_store().await;
    let watcher = raw_client(&cluster().url()).await;
    let deadlocks_before = deadlocks(&watcher).await;
    let req = claim_req(fingerprint("deadlock"), 30_000);
    let mut owned = Vec::new();
    for _ in 0..2 {
        let scope = fresh_scope();
        let (claim_id, _, _) = must_win(&store, &scope, &req).await;
        owned.push((scope, claim_id));
    }
    owned.sort();
    let [(first, first_id), (second, second_id)] = owned[..] else {
        unreachable!()
    };
    // Another transaction locks the batch's second row and, once the batch holds the
    // first and waits for the second, the first: a lock cycle. It waits long before
    // looking for deadlocks, so the batch (Postgres' default, 1 s) is the one cancelled.
    let other = Arc::new(raw_client(&cluster().url()).await);
    other
        .batch_execute("SET deadlock_timeout = '30s'; BEGIN")
        .await
        .unwrap();
    let lock = "SELECT 1 FROM keyflight_records WHERE scope = $1 FOR UPDATE";
    other.execute(lock, &[&second.0.as_slice()]).await.unwrap();

    let gate = Gate::hold(&store, &app).await;
    let finalizes = [
        spawn_finalize(&store, first, finalize_ok(first_id)),
        spawn_finalize(&store, second, finalize_ok(second_id)),
    ];
    wait_for_queued(&store, BatchKind::Finalize, 2).await;
    gate.open().await;
    wait_for_lock_waits(&watcher, &app, 1).await;
    let cycle = {
        let other = Arc::clone(&other);
        tokio::spawn(async move { other.execute(lock, &[&first.0.as_slice()]).await })
    };
    // The batch is cancelled; the other transaction gets the first row; the two
    // finalizes, now single, wait for it and land when it commits.
    cycle.await.unwrap().unwrap();
    other.batch_execute("COMMIT").await.unwrap();
    for finalize in finalizes {
        finalize.await.unwrap().unwrap();
    }
    for (scope, claim_id) in [(first, first_id), (second, second_id)] {
        assert_eq!(
            recorded(&watcher, &scope).await,
            ("completed".into(), claim_id, Some(sample_response().body))
        );
    }
    eventually(
        "Postgres counted the deadlock",
        Duration::from_secs(10),
        || async { deadlocks(&watcher).await > deadlocks_before },
    )
    .await;
    assert_eq!(store.batch_sizes().totals(BatchKind::Finalize).largest, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalize_batch_that_times_out_runs_its_calls_singly_and_the_blocked_ones_retry_lands() {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    let req = claim_req(fingerprint("timeout"), 30_000);
    let mut owned = Vec::new();
    for _ in 0..5 {
        let scope = fresh_scope();
        let (claim_id, _, _) = must_win(&store, &scope, &req).await;
        owned.push((scope, claim_id));
    }
    // One transaction locks the gate's record and one of the batch's past
    // `statement_timeout` (2 s): first the gate's finalize, then the batch, wait on it.
    let gate = fresh_scope();
    let (gate_id, _, _) = must_win(&store, &gate, &req).await;
    db.batch_execute("BEGIN").await.unwrap();
    for scope in [gate, owned[2].0] {
        db.execute(
            "SELECT 1 FROM keyflight_records WHERE scope = $1 FOR UPDATE",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();
    }
    let held = spawn_finalize(&store, gate, finalize_ok(gate_id));
    // (Watched from another session: a transaction sees one snapshot of pg_stat_activity.)
    let watcher = raw_client(&cluster().url()).await;
    wait_for_lock_waits(&watcher, &app, 1).await;
    let finalizes: Vec<_> = owned
        .iter()
        .map(|(scope, claim_id)| spawn_finalize(&store, *scope, finalize_ok(*claim_id)))
        .collect();
    wait_for_queued(&store, BatchKind::Finalize, owned.len()).await;

    let cancelled = |answer: Result<(), StoreError>| match answer {
        Err(StoreError::Unavailable(message)) => assert!(message.starts_with("57014"), "{message}"),
        other => panic!("a finalize whose statement timed out answered {other:?}"),
    };
    cancelled(held.await.unwrap());
    // The batch timed out as a whole, and is nobody's answer: each finalize ran alone, so
    // four landed and only the locked record's timed out again, its record still pending.
    for (i, finalize) in finalizes.into_iter().enumerate() {
        match i {
            2 => cancelled(finalize.await.unwrap()),
            _ => finalize.await.unwrap().unwrap(),
        }
    }
    assert_eq!(
        recorded(&db, &owned[2].0).await,
        ("pending".into(), owned[2].1, None)
    );
    db.batch_execute("ROLLBACK").await.unwrap();
    for (scope, claim_id) in owned.iter().copied().chain([(gate, gate_id)]) {
        store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    }
    assert_eq!(store.batch_sizes().totals(BatchKind::Finalize).largest, 5);
}
