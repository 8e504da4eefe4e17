//! Failure modes against a real Postgres that goes away: the store starts
//! without its database, answers `Unavailable` promptly (bounded by its
//! timeouts, never a hang) when the database crashes, and recovers — pool and
//! LISTEN connection alike — when it comes back. Each test owns its cluster,
//! since it stops it.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{Store, StoreError, migrate};
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, RenewRequest};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::eventually;
use tokio::sync::watch;

/// Generous bound for "promptly": the store's timeouts are 2 s.
const PROMPT: Duration = Duration::from_secs(5);

/// How long a recovery may take before the test fails.
const RECOVERY: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_store_starts_without_its_database_and_is_ready_only_once_migrated() {
    let cluster = PgCluster::start();
    cluster.stop();
    let store = Store::connect(&settings(&cluster.url())).await.unwrap();
    let started = Instant::now();
    assert!(matches!(
        store.readiness().await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store
            .claim(&fresh_scope(), &claim_req(fingerprint("x"), 1000))
            .await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < PROMPT);

    cluster.restart();
    match store.readiness().await {
        Err(StoreError::Unavailable(message)) => assert!(message.contains("migrate"), "{message}"),
        other => panic!("an unmigrated database must not be ready: {other:?}"),
    }
    let report = migrate(&cluster.url()).await.unwrap();
    let versions: Vec<i64> = report.applied.iter().map(|(version, _)| *version).collect();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert!(report.to_string().starts_with("applied V1__"), "{report}");
    store.readiness().await.unwrap();
    let again = migrate(&cluster.url()).await.unwrap();
    assert!(again.applied.is_empty());
    assert!(again.to_string().contains("up to date"), "{again}");
}

#[tokio::test]
async fn a_database_crash_is_unavailable_promptly_and_everything_recovers_after_restart() {
    let cluster = PgCluster::start();
    migrate(&cluster.url()).await.unwrap();
    let store = Store::connect(&settings(&cluster.url())).await.unwrap();
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&cluster.url(), shutdown_rx);
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(fingerprint("crash"), 30_000)).await;
    eventually("listener up", RECOVERY, || async { longpoll.listening() }).await;

    cluster.stop();
    let started = Instant::now();
    assert!(matches!(
        store
            .claim(&fresh_scope(), &claim_req(fingerprint("x"), 1000))
            .await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store
            .renew(
                &scope,
                &RenewRequest {
                    claim_id,
                    lease_ms: 30_000,
                    previous_scope: None,
                }
            )
            .await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.readiness().await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
    eventually("listener noticed", RECOVERY, || async {
        !longpoll.listening()
    })
    .await;

    cluster.restart();
    eventually("ready again", RECOVERY, || async {
        store.readiness().await.is_ok()
    })
    .await;
    eventually("listener back", RECOVERY, || async { longpoll.listening() }).await;
    // The pending record survived the crash (its commit was acknowledged).
    let follower = {
        let (store, longpoll) = (store.clone(), longpoll.clone());
        tokio::spawn(async move {
            let req = ClaimRequest {
                wait_ms: Some(30_000),
                ..claim_req(fingerprint("crash"), 30_000)
            };
            claim_with_wait(&store, &longpoll, &scope, &req).await
        })
    };
    eventually("follower parked", RECOVERY, || async {
        longpoll.waiting() == 1
    })
    .await;
    let finalized_at = Instant::now();
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    assert!(matches!(
        follower.await.unwrap().unwrap(),
        ClaimResponse::Completed { .. }
    ));
    assert!(finalized_at.elapsed() < PROMPT);
}

#[tokio::test]
async fn replicas_migrating_at_once_all_succeed() {
    let cluster = PgCluster::start();
    let url = cluster.url();
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { migrate(&url).await })
        })
        .collect();
    let mut applied = 0;
    for run in runs {
        applied += run.await.unwrap().unwrap().applied.len();
    }
    assert_eq!(applied, 12, "each migration is applied by exactly one run");
    let store = Store::connect(&settings(&url)).await.unwrap();
    store.readiness().await.unwrap();
}
