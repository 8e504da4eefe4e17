//! Hole 5 of issue 19: a claim that commits after its caller gave up (the HTTP call was
//! dropped while the statement ran, or a group-commit batch finished after its callers
//! stopped waiting) is an *orphan*: nobody holds its `claim_id`, so nobody renews or settles
//! it. It must not leave the key `in_progress` for a whole lease and then be taken over as
//! if a winner had died (`recovered_abandoned`): the store releases it. An orphan that
//! took an earlier request's record over gives that record back instead of deleting it, so
//! the key stays that request's: another body is still a conflict.
//!
//! How a test makes a claim commit after its caller left, without sleeping: a transaction
//! holds an uncommitted row on the claim's scope, so the claim's statement waits for it
//! (seen in `pg_stat_activity`); the caller is dropped; the transaction rolls back, and the
//! claim's `INSERT` goes on and commits on the server.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::support::*;
use keyflight_lease_store::store::{BatchKind, BatchSettings, Store, StoreSettings};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, WonHow};
use keyflight_testkit::pg::wait_for_lock_waits;
use keyflight_testkit::process::eventually;
use uuid::Uuid;

/// A store with batching off and its own `application_name` (returned).
async fn single_path_store() -> (Store, String) {
    let app = format!("orphan-test-{}", Uuid::now_v7().simple());
    let url = format!("{}?application_name={app}", cluster().url());
    let settings = StoreSettings {
        batch: BatchSettings::OFF,
        ..settings(&url)
    };
    (Store::connect(&settings).await.unwrap(), app)
}

/// An open transaction holding an uncommitted pending row on each of `scopes`.
async fn gate(scopes: &[Digest]) -> tokio_postgres::Client {
    let db = raw_client(&cluster().url()).await;
    db.batch_execute("BEGIN").await.unwrap();
    for scope in scopes {
        insert_pending_row(&db, scope).await;
    }
    db
}

/// Claims `scope` with `req` while `held` keeps the statement waiting on a lock, drops the
/// caller mid-statement (the proxy timed out), then lets the statement go on and commit.
async fn claim_and_hang_up(
    store: &Store,
    app: &str,
    scope: Digest,
    req: ClaimRequest,
    held: tokio_postgres::Client,
) {
    let caller = {
        let store = store.clone();
        tokio::spawn(async move { store.claim(&scope, &req).await })
    };
    let watcher = raw_client(&cluster().url()).await;
    wait_for_lock_waits(&watcher, app, 1).await;
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    held.batch_execute("ROLLBACK").await.unwrap();
}

/// Waits until the orphan on `scope` is gone, then checks a retry wins it afresh.
async fn released_and_won_afresh(store: &Store, scope: &Digest, label: &str) {
    let db = raw_client(&cluster().url()).await;
    eventually(
        "the orphan claim is released",
        Duration::from_secs(15),
        || async { row_state(&db, scope).await.is_none() },
    )
    .await;
    let (_, _, how) = must_win(store, scope, &claim_req(fingerprint(label), 30_000)).await;
    assert_eq!(how, WonHow::Claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_caller_left_while_it_ran_is_released() {
    let (store, app) = single_path_store().await;
    let scope = fresh_scope();
    let held = gate(&[scope]).await;
    // The HTTP call is gone (the proxy timed out): its handler is dropped mid-statement.
    claim_and_hang_up(
        &store,
        &app,
        scope,
        claim_req(fingerprint("left"), 30_000),
        held,
    )
    .await;

    released_and_won_afresh(&store, &scope, "left").await;
    assert_eq!(store.orphans_released(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_a_batch_that_finished_after_their_callers_gave_up_are_released() {
    let (store, app) = one_worker_store().await;
    let watcher = raw_client(&cluster().url()).await;
    // The worker is held by a claim of `first`; `fresh` and `blocked` queue behind it.
    let (first, fresh, blocked) = (fresh_scope(), fresh_scope(), fresh_scope());
    let first_gate = gate(&[first]).await;
    let blocked_gate = gate(&[blocked]).await;
    let req = claim_req(fingerprint("batch"), 30_000);
    let spawn = |scope: Digest| {
        let (store, req) = (store.clone(), req.clone());
        tokio::spawn(async move { store.claim(&scope, &req).await })
    };
    let holder = spawn(first);
    wait_for_lock_waits(&watcher, &app, 1).await;
    let callers = [spawn(fresh), spawn(blocked)];
    wait_for_queued(&store, BatchKind::Claim, 2).await;
    // The worker takes both as one batch, which waits on `blocked`'s row...
    first_gate.batch_execute("ROLLBACK").await.unwrap();
    assert!(matches!(
        holder.await.unwrap().unwrap().response,
        ClaimResponse::Won { .. }
    ));
    wait_for_queued(&store, BatchKind::Claim, 0).await;
    wait_for_lock_waits(&watcher, &app, 1).await;
    // ...while both callers give up; then it commits.
    for caller in callers {
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
    }
    blocked_gate.batch_execute("ROLLBACK").await.unwrap();

    released_and_won_afresh(&store, &fresh, "batch").await;
    released_and_won_afresh(&store, &blocked, "batch").await;
    assert_eq!(store.orphans_released(), 2);
}

/// Waits until the orphan takeover on `scope` is given back, then checks that the record is
/// still `label`'s: another body is a conflict, and `label` takes it over at once.
async fn given_back_and_still_the_requests(store: &Store, scope: &Digest, label: &str) {
    let db = raw_client(&cluster().url()).await;
    eventually(
        "the orphan takeover is given back",
        Duration::from_secs(15),
        || async { store.orphans_released() >= 1 },
    )
    .await;
    let (state, _, _) = row_state(&db, scope).await.expect("the record is kept");
    assert_eq!(state, "failed");
    assert_eq!(
        store
            .claim(scope, &claim_req(fingerprint("another body"), 30_000))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );
    let (_, _, how) = must_win(store, scope, &claim_req(fingerprint(label), 30_000)).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_of_a_failed_record_whose_caller_left_gives_the_record_back() {
    let (store, app) = single_path_store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("declined"), 30_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    release_as_cooldown(&store, &scope, claim_id, 1).await;
    wait_for_lease_expiry(&db, &scope).await;
    let held = lock_record(&scope).await;
    claim_and_hang_up(&store, &app, scope, req, held).await;

    given_back_and_still_the_requests(&store, &scope, "declined").await;
    assert_eq!(store.orphans_released(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_takeover_of_a_lapsed_lease_whose_caller_left_gives_the_record_back() {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    must_win(&store, &scope, &claim_req(fingerprint("lapsed"), 1)).await;
    wait_for_lease_expiry(&db, &scope).await;
    let held = lock_record(&scope).await;
    let req = claim_req(fingerprint("lapsed"), 30_000);
    claim_and_hang_up(&store, &app, scope, req, held).await;

    given_back_and_still_the_requests(&store, &scope, "lapsed").await;
    assert_eq!(store.orphans_released(), 1);
}
