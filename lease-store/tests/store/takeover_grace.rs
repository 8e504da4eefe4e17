//! The takeover grace: right after a replica starts, and right after its database answers
//! again following an outage, it takes over no expired pending lease, so a winner that is
//! alive (its proxy's outbox resending the record) lands the record before a retry can run
//! the operation a second time. A winner that really died is taken over once the grace ends.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::store::{Store, StoreError, StoreSettings};
use keyflight_protocol::wire::{ClaimResponse, WonHow};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::eventually;

const GRACE: Duration = Duration::from_millis(1500);

fn with_grace(url: &str, grace: Duration) -> StoreSettings {
    StoreSettings {
        takeover_grace: grace,
        ..settings(url)
    }
}

/// A pending record on `scope` whose 1 s lease has run out, won by a store without grace.
async fn expired_lease(scope: &keyflight_protocol::Digest, label: &str) -> uuid::Uuid {
    let winner = store().await;
    let db = raw_client(&cluster().url()).await;
    let (claim_id, _, _) = must_win(&winner, scope, &claim_req(fingerprint(label), 1000)).await;
    wait_for_lease_expiry(&db, scope).await;
    claim_id
}

#[tokio::test]
async fn a_replica_that_just_started_lets_a_live_winner_record_its_answer_first() {
    let scope = fresh_scope();
    let claim_id = expired_lease(&scope, "alive").await;
    let restarted = Store::connect(&with_grace(&cluster().url(), GRACE))
        .await
        .unwrap();
    let req = claim_req(fingerprint("alive"), 1000);
    let attempt = restarted.claim(&scope, &req).await.unwrap();
    assert!(
        matches!(attempt.response, ClaimResponse::InProgress { retry_after_s } if retry_after_s >= 1),
        "{attempt:?}"
    );
    let until = attempt
        .pending_until
        .expect("a waiter wakes when the grace ends");
    assert!(until > Instant::now() && until <= Instant::now() + GRACE);

    // The winner's outbox delivers its record (here: through the new replica).
    restarted
        .finalize(&scope, finalize_ok(claim_id))
        .await
        .unwrap();
    assert_eq!(
        restarted.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
}

#[tokio::test]
async fn a_dead_winner_is_taken_over_once_the_grace_ends() {
    let scope = fresh_scope();
    expired_lease(&scope, "dead").await;
    let restarted = Store::connect(&with_grace(&cluster().url(), GRACE))
        .await
        .unwrap();
    let started = Instant::now();
    let req = claim_req(fingerprint("dead"), 1000);
    assert!(matches!(
        restarted.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::InProgress { .. }
    ));
    let (_, _, how) = loop {
        match restarted.claim(&scope, &req).await.unwrap().response {
            ClaimResponse::Won {
                claim_id,
                fence,
                how,
                ..
            } => break (claim_id, fence, how),
            ClaimResponse::InProgress { .. } => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(how, WonHow::RecoveredAbandoned);
    assert!(started.elapsed() >= GRACE - Duration::from_millis(100));
}

#[tokio::test]
async fn the_grace_never_delays_a_cooldown_or_a_fresh_claim() {
    let store = Store::connect(&with_grace(&cluster().url(), Duration::from_secs(60)))
        .await
        .unwrap();
    let (_, _, how) = must_win(&store, &fresh_scope(), &claim_req(fingerprint("new"), 1000)).await;
    assert_eq!(how, WonHow::Claimed);

    let scope = fresh_scope();
    let req = claim_req(fingerprint("cool"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store
        .release(
            &scope,
            &keyflight_protocol::wire::ReleaseRequest {
                claim_id,
                release_as: keyflight_protocol::wire::ReleaseAs::Cooldown,
                cooldown_ms: Some(1),
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    let (_, _, how) = loop {
        match store.claim(&scope, &req).await.unwrap().response {
            ClaimResponse::Won {
                claim_id,
                fence,
                how,
                ..
            } => break (claim_id, fence, how),
            ClaimResponse::Cooldown { .. } => tokio::time::sleep(Duration::from_millis(5)).await,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        how,
        WonHow::RecoveredAbandoned,
        "the documented retry after a cooldown"
    );
}

/// A cluster the test may stop, a store on it past its start-up grace, and a pending
/// record won there with a 1 s lease (and the request that won it).
async fn won_on_a_cluster_of_its_own(
    label: &str,
) -> (
    PgCluster,
    Store,
    keyflight_protocol::Digest,
    keyflight_protocol::wire::ClaimRequest,
) {
    let cluster = PgCluster::start();
    migrate_blocking(&cluster.url());
    let store = Store::connect(&with_grace(&cluster.url(), GRACE))
        .await
        .unwrap();
    let scope = fresh_scope();
    let req = claim_req(fingerprint(label), 1000);
    // Past the start-up grace.
    tokio::time::sleep(GRACE).await;
    must_win(&store, &scope, &req).await;
    (cluster, store, scope, req)
}

#[tokio::test]
async fn after_a_database_outage_a_new_grace_starts() {
    let (cluster, store, scope, req) = won_on_a_cluster_of_its_own("outage").await;
    let db = raw_client(&cluster.url()).await;

    drop(db);
    cluster.stop();
    assert!(matches!(
        store.claim(&scope, &req).await,
        Err(StoreError::Unavailable(_))
    ));
    cluster.restart();
    // The lease ran out during the outage; the first answers after it are held.
    let db = raw_client(&cluster.url()).await;
    wait_for_lease_expiry(&db, &scope).await;
    let back = Instant::now();
    eventually(
        "the store answers again",
        Duration::from_secs(20),
        || async { store.readiness().await.is_ok() },
    )
    .await;
    let attempt = store.claim(&scope, &req).await.unwrap();
    assert!(
        matches!(attempt.response, ClaimResponse::InProgress { .. }),
        "{attempt:?}"
    );
    assert!(attempt.pending_until.unwrap() >= back);
}

/// Hole 6 of issue 19: a replica that made no database call while Postgres was down must
/// still hold takeovers once it is back, or a retry takes the lease over before the live
/// winner's outbox lands its record.
#[tokio::test]
async fn a_replica_idle_through_an_outage_still_holds_takeovers_after_it() {
    let (cluster, store, scope, req) = won_on_a_cluster_of_its_own("idle outage").await;

    cluster.stop();
    // The outage outlasts the 1 s lease; nothing asks this store anything meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.restart();
    let db = raw_client(&cluster.url()).await;
    wait_for_lease_expiry(&db, &scope).await;
    let back = Instant::now();

    // One call, which must succeed: a failed one would itself start the grace.
    let attempt = store.claim(&scope, &req).await.unwrap();
    assert!(
        matches!(attempt.response, ClaimResponse::InProgress { .. }),
        "the lease was taken over right after the outage: {attempt:?}"
    );
    assert!(attempt.pending_until.unwrap() >= back);
}
