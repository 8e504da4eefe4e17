//! Failure modes against a Postgres that stops answering without closing
//! anything (a hung host, a stalled VM), simulated by SIGSTOPping the cluster:
//! the store answers `Unavailable` within its timeout instead of hanging,
//! never hands the stuck connection to the next caller, and the `LISTEN`
//! connection notices and reconnects. Each test owns its cluster, since it
//! freezes it.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::LongPoll;
use keyflight_lease_store::store::{BatchSettings, Store, StoreError, StoreSettings, migrate};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, WonHow};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::pg::wait_for_lock_waits;
use keyflight_testkit::process::eventually;
use tokio::sync::watch;

/// A short server-side timeout, so the test's bounds are short too.
const STATEMENT_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a call may take while the database is frozen: twice the timeout.
const BOUND: Duration = Duration::from_millis(1000);

/// Thaws the cluster when dropped, so a failed assertion never leaves it
/// stopped (a stopped cluster cannot be shut down).
struct Thaw<'a>(&'a PgCluster);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

fn short_timeout_settings(url: &str) -> StoreSettings {
    StoreSettings {
        statement_timeout: STATEMENT_TIMEOUT,
        takeover_grace: Duration::ZERO,
        ..settings(url)
    }
}

/// Runs `call`, failing the test (rather than hanging it) if it takes far
/// longer than `BOUND`; returns its result and how long it took.
async fn timed<T>(call: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let result = tokio::time::timeout(BOUND * 10, call)
        .await
        .unwrap_or_else(|_| panic!("the call hung for {:?}", BOUND * 10));
    (result, started.elapsed())
}

/// Gives the store's pool at least two connections that have run a claim (its statements
/// prepared), so that a claim sent while the database is frozen finds one idle even when
/// the database probe (`store/probe.rs`) holds the other: a claim that had to open a
/// connection, or prepare its statement, would never reach the frozen server.
async fn two_warm_connections(store: &Store) {
    eventually(
        "two pooled connections that ran a claim",
        Duration::from_secs(10),
        || async {
            let claims = (0..4).map(|_| async {
                must_win(
                    store,
                    &fresh_scope(),
                    &claim_req(fingerprint("warm"), 30_000),
                )
                .await
            });
            futures_util::future::join_all(claims).await;
            store.pool_status().size >= 2
        },
    )
    .await;
}

#[tokio::test]
async fn a_frozen_database_is_unavailable_within_the_timeout_and_the_stuck_connection_is_discarded()
{
    let cluster = PgCluster::start();
    migrate(&cluster.url()).await.unwrap();
    let store = Store::connect(&short_timeout_settings(&cluster.url()))
        .await
        .unwrap();
    must_win(&store, &fresh_scope(), &claim_req(fingerprint("a"), 30_000)).await;
    // (The store's database probe may hold a second one.)
    assert!(
        store.pool_status().size >= 1,
        "the pool keeps the connection"
    );

    let thaw = Thaw(&cluster);
    cluster.freeze();
    let (claimed, took) =
        timed(store.claim(&fresh_scope(), &claim_req(fingerprint("b"), 1000))).await;
    assert!(
        matches!(claimed, Err(StoreError::Unavailable(_))),
        "{claimed:?}"
    );
    assert!(took < BOUND, "claim took {took:?}");
    // The probe's connection, stuck as well, leaves within its own answer bound.
    eventually(
        "the connections that timed out left the pool",
        BOUND,
        || async { store.pool_status().size == 0 },
    )
    .await;
    let (ready, took) = timed(store.readiness()).await;
    assert!(
        matches!(ready, Err(StoreError::Unavailable(_))),
        "{ready:?}"
    );
    assert!(took < BOUND, "readiness took {took:?}");
    drop(thaw);

    let (claimed, took) =
        timed(store.claim(&fresh_scope(), &claim_req(fingerprint("c"), 1000))).await;
    assert!(claimed.is_ok(), "{claimed:?}");
    assert!(took < BOUND, "the first claim after thawing took {took:?}");
}

#[tokio::test]
async fn the_listen_connection_notices_a_frozen_database_and_reconnects() {
    let cluster = PgCluster::start();
    migrate(&cluster.url()).await.unwrap();
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&cluster.url(), shutdown_rx);
    eventually("listener up", Duration::from_secs(30), || async {
        longpoll.listening()
    })
    .await;

    let thaw = Thaw(&cluster);
    cluster.freeze();
    eventually(
        "listener noticed the freeze",
        Duration::from_secs(30),
        || async { !longpoll.listening() },
    )
    .await;
    drop(thaw);
    eventually("listener back", Duration::from_secs(30), || async {
        longpoll.listening()
    })
    .await;
}

/// A record a declined request left, its cooldown and lease over: the returned request's
/// next claim takes it over. The pool is warmed for the freeze that follows.
async fn a_record_to_take_over(
    store: &Store,
    db: &tokio_postgres::Client,
) -> (Digest, ClaimRequest) {
    let scope = fresh_scope();
    let req = claim_req(fingerprint("declined"), 30_000);
    let (claim_id, _, _) = must_win(store, &scope, &req).await;
    release_as_cooldown(store, &scope, claim_id, 1).await;
    wait_for_lease_expiry(db, &scope).await;
    two_warm_connections(store).await;
    (scope, req)
}

/// A takeover whose answer the store never read — the database stalled past the answer
/// bound, then committed it — is given back, not deleted (`docs/records.md#orphan-claims`):
/// the record keeps the earlier request's fingerprint, so another body is still a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_the_database_committed_after_the_answer_bound_is_given_back() {
    let cluster = PgCluster::start();
    migrate(&cluster.url()).await.unwrap();
    let store = Store::connect(&StoreSettings {
        batch: BatchSettings::OFF,
        ..short_timeout_settings(&cluster.url())
    })
    .await
    .unwrap();
    let db = raw_client(&cluster.url()).await;
    let (scope, req) = a_record_to_take_over(&store, &db).await;

    // The takeover's statement reaches a frozen server; the store gives up on it at the
    // answer bound, and the server runs it once it is thawed.
    let thaw = Thaw(&cluster);
    cluster.freeze();
    let (claimed, _) = timed(store.claim(&scope, &req)).await;
    assert!(
        matches!(claimed, Err(StoreError::Unavailable(_))),
        "{claimed:?}"
    );
    drop(thaw);

    eventually(
        "the unread takeover is released",
        Duration::from_secs(15),
        || async { store.orphans_released() >= 1 },
    )
    .await;
    let (state, _, _) = row_state(&db, &scope).await.expect("the record is kept");
    assert_eq!(state, "failed");
    assert_eq!(
        store
            .claim(&scope, &claim_req(fingerprint("another body"), 30_000))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );
    let (_, _, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
}

/// After a freeze longer than the statement's answer bound, a claim that then commits late
/// is still released: the release looks for one more answer bound after the database first
/// answers it again (`ReleaseDeadline`), rather than stopping at the bound counted from
/// before the freeze. Here the claim, once thawed, waits on a transaction holding its
/// record, so the release's first answer finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_commits_after_a_long_freeze_is_still_released() {
    const TIMEOUT: Duration = Duration::from_secs(3);
    let answer_bound = TIMEOUT + keyflight_lease_store::store::ANSWER_MARGIN;
    let cluster = PgCluster::start();
    migrate(&cluster.url()).await.unwrap();
    let app = "frozen-late-release";
    let store = Store::connect(&StoreSettings {
        batch: BatchSettings::OFF,
        statement_timeout: TIMEOUT,
        ..short_timeout_settings(&format!("{}?application_name={app}", cluster.url()))
    })
    .await
    .unwrap();
    let db = raw_client(&cluster.url()).await;
    let (scope, req) = a_record_to_take_over(&store, &db).await;
    let holder = raw_client(&cluster.url()).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM keyflight_records WHERE scope = $1 FOR UPDATE",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();

    let thaw = Thaw(&cluster);
    cluster.freeze();
    let (claimed, _) = timed(store.claim(&scope, &req)).await;
    assert!(
        matches!(claimed, Err(StoreError::Unavailable(_))),
        "{claimed:?}"
    );
    // The fault itself: the database stays frozen past the bound the release counted from
    // the claim (its guard dropped just now).
    tokio::time::sleep(answer_bound + Duration::from_millis(500)).await;
    drop(thaw);

    // Thawed, the claim waits on the holder; the release's next answer finds no row. Held
    // for a second (well inside the claim's statement timeout), long enough for a release
    // that stops at the old bound to have given up; then the claim commits.
    wait_for_lock_waits(&db, app, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    holder.batch_execute("ROLLBACK").await.unwrap();

    eventually(
        "the late claim is released",
        Duration::from_secs(15),
        || async { store.orphans_released() >= 1 },
    )
    .await;
    let (state, _, _) = row_state(&db, &scope).await.expect("the record is kept");
    assert_eq!(state, "failed");
}
