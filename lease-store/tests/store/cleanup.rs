//! L5 against a real Postgres: retention cleanup deletes terminal rows and
//! abandoned `pending` rows past retention, in batches, and never a live
//! (reclaimed or leased) row nor an `unknown` one; it makes an at-most-once claim's
//! abandoned lapse `unknown` once past the settle horizon.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use keyflight_lease_store::cleanup::run_once;
use keyflight_lease_store::store::{Store, StoreSettings};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, RecordState, ReleaseAs, ReleaseRequest, WonHow,
};
use tokio::sync::Mutex;

/// Cleanup deletes rows of every test in this binary, so the tests that
/// count deletions take turns.
static CLEANUP: Mutex<()> = Mutex::const_new(());

/// A completed record already past its retention.
async fn expired_completed(store: &Store, db: &tokio_postgres::Client, label: &str) -> Digest {
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(store, &scope, &claim_req(fingerprint(label), 10_000)).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    age_past_retention(db, &scope).await;
    scope
}

/// Moves the scope's lease end back past the test store's settle horizon: its
/// winner's outbox has long given up.
async fn age_lease_past_settle_horizon(db: &tokio_postgres::Client, scope: &Digest) {
    let aged = db
        .execute(
            "UPDATE keyflight_records
                SET lease_expires_at = clock_timestamp() - $2::bigint * interval '1 millisecond'
              WHERE scope = $1",
            &[
                &scope.0.as_slice(),
                &i64::try_from(2 * SETTLE_HORIZON.as_millis()).unwrap(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(aged, 1, "no record to age");
}

#[tokio::test]
async fn cleanup_never_deletes_a_record_reclaimed_after_its_retention() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = expired_completed(&store, &db, "reclaimed").await;
    let (claim_id, _, how) = must_win(&store, &scope, &claim_req(fingerprint("new"), 10_000)).await;
    assert_eq!(how, WonHow::RecoveredTtl);

    run_once(&store, 100).await.unwrap();
    let (state, _, owner) = row_state(&db, &scope).await.unwrap();
    assert_eq!((state.as_str(), owner), ("pending", Some(claim_id)));
}

#[tokio::test]
async fn cleanup_keeps_pending_unknown_and_unexpired_rows() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;

    // Leases outlive the test binary: a lease running out mid-run would let
    // another test's pass delete the row and skew its count.
    let req = claim_req(fingerprint("kept"), 600_000);
    let pending = fresh_scope();
    must_win(&store, &pending, &req).await;
    age_past_retention(&db, &pending).await;
    let unknown = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &unknown, &req).await;
    store
        .release(
            &unknown,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Unknown,
                cooldown_ms: None,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    age_past_retention(&db, &unknown).await;
    let fresh = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &fresh, &claim_req(fingerprint("kept"), 10_000)).await;
    store.finalize(&fresh, finalize_ok(claim_id)).await.unwrap();

    run_once(&store, 100).await.unwrap();
    for scope in [pending, unknown, fresh] {
        assert!(
            row_state(&db, &scope).await.is_some(),
            "{scope} was deleted"
        );
    }
}

#[tokio::test]
async fn cleanup_deletes_an_abandoned_pending_row_past_retention_but_never_a_leased_one() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;

    let abandoned = fresh_scope();
    must_win(&store, &abandoned, &claim_req(fingerprint("crashed"), 50)).await;
    age_lease_past_settle_horizon(&db, &abandoned).await;
    age_past_retention(&db, &abandoned).await;
    let leased = fresh_scope();
    let (claim_id, _, _) =
        must_win(&store, &leased, &claim_req(fingerprint("slow"), 600_000)).await;
    age_past_retention(&db, &leased).await;

    run_once(&store, 100).await.unwrap();
    assert!(
        row_state(&db, &abandoned).await.is_none(),
        "an abandoned pending row past retention must be deleted"
    );
    let (state, _, owner) = row_state(&db, &leased).await.unwrap();
    assert_eq!((state.as_str(), owner), ("pending", Some(claim_id)));
}

/// Hole 1 of issue 19: a retention shorter than the run plus an outage. The lease ran out
/// while the winner could not reach the store, and the row is past its retention; the
/// winner's outbox still resends its finalize, which must find the row, or the next retry
/// wins a fresh insert and runs again, uncounted.
#[tokio::test]
async fn cleanup_keeps_an_expired_pending_row_that_its_winner_may_still_settle() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(fingerprint("outage"), 50)).await;
    wait_for_lease_expiry(&db, &scope).await;
    age_past_retention(&db, &scope).await;

    run_once(&store, 100).await.unwrap();
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    let (state, _, owner) = row_state(&db, &scope).await.unwrap();
    assert_eq!((state.as_str(), owner), ("completed", Some(claim_id)));
}

#[tokio::test]
async fn a_replica_in_its_takeover_grace_deletes_no_pending_row() {
    let _turn = CLEANUP.lock().await;
    let db = raw_client(&cluster().url()).await;
    let in_grace = Store::connect(&StoreSettings {
        takeover_grace: std::time::Duration::from_secs(600),
        ..settings(&cluster().url())
    })
    .await
    .unwrap();
    let scope = fresh_scope();
    must_win(&in_grace, &scope, &claim_req(fingerprint("grace"), 50)).await;
    age_lease_past_settle_horizon(&db, &scope).await;
    age_past_retention(&db, &scope).await;

    run_once(&in_grace, 100).await.unwrap();
    assert!(row_state(&db, &scope).await.is_some());
    run_once(&store().await, 100).await.unwrap();
    assert!(row_state(&db, &scope).await.is_none());
}

#[tokio::test]
async fn cleanup_deletes_expired_terminal_rows_in_batches_and_counts_them() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    // Leftovers of other tests would skew the count: start from a clean slate.
    run_once(&store, 1000).await.unwrap();

    let mut scopes = Vec::new();
    for i in 0..7 {
        scopes.push(expired_completed(&store, &db, &format!("batch {i}")).await);
    }
    let failed = fresh_scope();
    let (claim_id, _, _) =
        must_win(&store, &failed, &claim_req(fingerprint("failed"), 10_000)).await;
    store
        .release(
            &failed,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Cooldown,
                cooldown_ms: Some(60_000),
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    age_past_retention(&db, &failed).await;
    scopes.push(failed);

    assert_eq!(store.delete_expired_batch(3).await.unwrap(), 3);
    assert_eq!(run_once(&store, 3).await.unwrap(), 5);
    for scope in &scopes {
        assert!(row_state(&db, scope).await.is_none());
    }
    assert_eq!(run_once(&store, 3).await.unwrap(), 0);
}

#[tokio::test]
async fn the_cleanup_loop_reports_each_batch_and_stops_on_shutdown() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    run_once(&store, 1000).await.unwrap();
    for i in 0..5 {
        expired_completed(&store, &db, &format!("loop {i}")).await;
    }
    let (batches_tx, mut batches) = tokio::sync::mpsc::unbounded_channel();
    let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    let handle = keyflight_lease_store::cleanup::spawn(
        store.clone(),
        keyflight_lease_store::cleanup::CleanupSettings {
            interval: std::time::Duration::from_millis(50),
            batch_size: 2,
        },
        move |n| {
            let _ = batches_tx.send(n);
        },
        shutdown_rx,
    );
    let mut seen = Vec::new();
    while seen.iter().sum::<u64>() < 5 {
        seen.push(batches.recv().await.unwrap());
    }
    assert_eq!(seen, vec![2, 2, 1]);
    shutdown.send(true).unwrap();
    handle.await.unwrap();
}

/// An at-most-once (hold policy) claim with a short lease.
fn held_req(label: &str) -> ClaimRequest {
    ClaimRequest {
        at_most_once: true,
        ..claim_req(fingerprint(label), 50)
    }
}

#[tokio::test]
async fn cleanup_holds_an_abandoned_at_most_once_lapse_as_unknown_once_past_the_settle_horizon() {
    let _turn = CLEANUP.lock().await;
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let abandoned = fresh_scope();
    let (claim_id, fence, _) = must_win(&store, &abandoned, &held_req("never retried")).await;
    age_lease_past_settle_horizon(&db, &abandoned).await;
    let recent = fresh_scope();
    must_win(&store, &recent, &held_req("lapsed just now")).await;
    wait_for_lease_expiry(&db, &recent).await;
    let retry_policy = fresh_scope();
    must_win(
        &store,
        &retry_policy,
        &claim_req(fingerprint("retry policy"), 50),
    )
    .await;
    age_lease_past_settle_horizon(&db, &retry_policy).await;

    run_once(&store, 100).await.unwrap();
    assert_eq!(
        row_state(&db, &abandoned).await.unwrap(),
        ("unknown".into(), fence, Some(claim_id)),
        "nobody claimed it again, yet its outcome is as uncertain"
    );
    assert!(store.lapses_held() >= 1, "counted");
    let listed = store.list(Some(RecordState::Unknown), 1000).await.unwrap();
    assert!(listed.records.iter().any(|r| r.scope == abandoned));
    assert_eq!(
        row_state(&db, &recent).await.unwrap().0,
        "pending",
        "within the settle horizon its winner may still land its record"
    );
    assert_eq!(
        row_state(&db, &retry_policy).await.unwrap().0,
        "pending",
        "a retry policy's lapse is left to a takeover"
    );
    assert_eq!(
        fenceless(
            store
                .claim(&abandoned, &held_req("never retried"))
                .await
                .unwrap()
                .response
        ),
        ClaimResponse::Unknown { fence: None }
    );
}

#[tokio::test]
async fn a_replica_in_its_takeover_grace_holds_no_abandoned_lapse() {
    let _turn = CLEANUP.lock().await;
    let db = raw_client(&cluster().url()).await;
    let in_grace = Store::connect(&StoreSettings {
        takeover_grace: std::time::Duration::from_secs(600),
        ..settings(&cluster().url())
    })
    .await
    .unwrap();
    let scope = fresh_scope();
    must_win(&in_grace, &scope, &held_req("grace, abandoned")).await;
    age_lease_past_settle_horizon(&db, &scope).await;

    run_once(&in_grace, 100).await.unwrap();
    assert_eq!(row_state(&db, &scope).await.unwrap().0, "pending");
    run_once(&store().await, 100).await.unwrap();
    assert_eq!(row_state(&db, &scope).await.unwrap().0, "unknown");
}
