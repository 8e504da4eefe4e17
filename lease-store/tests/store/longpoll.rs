//! L4 against a real Postgres: followers long-poll without holding a
//! connection and are woken by NOTIFY from another replica, or at the
//! winner's lease expiry.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::Store;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, WonHow};
use keyflight_testkit::process::eventually;
use tokio::sync::watch;

/// How long a follower may take to park or the listener to connect.
const SETTLE: Duration = Duration::from_secs(10);

/// One lease-store "replica": its own pool and its own LISTEN connection.
struct Replica {
    store: Store,
    longpoll: LongPoll,
    shutdown: watch::Sender<bool>,
}

async fn replica() -> Replica {
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&cluster().url(), shutdown_rx);
    eventually("the LISTEN connection is up", SETTLE, || async {
        longpoll.listening()
    })
    .await;
    Replica {
        store: store().await,
        longpoll,
        shutdown,
    }
}

fn waiting_req(label: &str, wait_ms: u64) -> ClaimRequest {
    ClaimRequest {
        wait_ms: Some(wait_ms),
        ..claim_req(fingerprint(label), 30_000)
    }
}

#[tokio::test]
async fn a_follower_on_one_replica_is_woken_by_a_finalize_on_another() {
    let (a, b) = (replica().await, replica().await);
    let scope = fresh_scope();
    let req = waiting_req("cross replica", 30_000);
    let (claim_id, _, _) = must_win(&b.store, &scope, &req).await;

    let follower = {
        let (store, longpoll, req) = (a.store.clone(), a.longpoll.clone(), req.clone());
        tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &req).await })
    };
    // The follower saw the pending record and parked (its claim is done).
    eventually("one follower parked", SETTLE, || async {
        a.longpoll.waiting() == 1
    })
    .await;
    assert_eq!(
        a.store.pool_status().size - a.store.pool_status().available,
        0
    );

    let finalized_at = Instant::now();
    b.store
        .finalize(&scope, finalize_ok(claim_id))
        .await
        .unwrap();
    let answer = follower.await.unwrap().unwrap();
    assert_eq!(
        answer,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    // The lease had 30 s left and the budget was 30 s: only the NOTIFY explains this.
    assert!(finalized_at.elapsed() < Duration::from_secs(5));
    assert_eq!(a.longpoll.waiting(), 0);
}

#[tokio::test]
async fn a_follower_wakes_at_an_abandoned_lease_expiry_and_wins() {
    let (a, b) = (replica().await, replica().await);
    let scope = fresh_scope();
    let abandoned = ClaimRequest {
        lease_ms: 400,
        ..waiting_req("abandoned", 0)
    };
    let (_, old_fence, _) = must_win(&b.store, &scope, &abandoned).await;

    let started = Instant::now();
    let answer = claim_with_wait(
        &a.store,
        &a.longpoll,
        &scope,
        &waiting_req("abandoned", 30_000),
    )
    .await
    .unwrap();
    match answer {
        ClaimResponse::Won { how, fence, .. } => {
            assert_eq!(how, WonHow::RecoveredAbandoned);
            assert!(fence > old_fence);
        }
        other => panic!("expected to steal the abandoned lease, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_follower_whose_budget_runs_out_gets_in_progress() {
    let a = replica().await;
    let scope = fresh_scope();
    must_win(&a.store, &scope, &waiting_req("slow", 0)).await;

    let started = Instant::now();
    let answer = claim_with_wait(&a.store, &a.longpoll, &scope, &waiting_req("slow", 300))
        .await
        .unwrap();
    assert!(matches!(answer, ClaimResponse::InProgress { retry_after_s } if retry_after_s >= 29));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn shutdown_releases_parked_followers_at_once() {
    let a = replica().await;
    let scope = fresh_scope();
    must_win(&a.store, &scope, &waiting_req("draining", 0)).await;

    let follower = {
        let (store, longpoll) = (a.store.clone(), a.longpoll.clone());
        tokio::spawn(async move {
            claim_with_wait(&store, &longpoll, &scope, &waiting_req("draining", 30_000)).await
        })
    };
    eventually("one follower parked", SETTLE, || async {
        a.longpoll.waiting() == 1
    })
    .await;
    let shutdown_at = Instant::now();
    a.shutdown.send(true).unwrap();
    let answer = follower.await.unwrap().unwrap();
    assert!(matches!(answer, ClaimResponse::InProgress { .. }));
    assert!(shutdown_at.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_different_fingerprint_never_waits() {
    let a = replica().await;
    let scope = fresh_scope();
    must_win(&a.store, &scope, &waiting_req("first", 0)).await;
    let started = Instant::now();
    let answer = claim_with_wait(
        &a.store,
        &a.longpoll,
        &scope,
        &waiting_req("second", 30_000),
    )
    .await
    .unwrap();
    assert_eq!(answer, ClaimResponse::Conflict);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn many_followers_woken_by_one_settle_share_one_read() {
    const FOLLOWERS: usize = 16;
    let (a, b) = (replica().await, replica().await);
    let scope = fresh_scope();
    let req = waiting_req("fan out", 30_000);
    let (claim_id, _, _) = must_win(&b.store, &scope, &req).await;

    let followers: Vec<_> = (0..FOLLOWERS)
        .map(|_| {
            let (store, longpoll, req) = (a.store.clone(), a.longpoll.clone(), req.clone());
            tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &req).await })
        })
        .collect();
    eventually("every follower parked", SETTLE, || async {
        a.longpoll.waiting() == FOLLOWERS
    })
    .await;
    let parked = a.longpoll.rechecks();
    // Each follower checked once, read-only: the record was not winnable.
    assert_eq!(parked.reads, FOLLOWERS as u64);
    assert_eq!(parked.claims, 0);

    b.store
        .finalize(&scope, finalize_ok(claim_id))
        .await
        .unwrap();
    for follower in followers {
        assert_eq!(
            follower.await.unwrap().unwrap(),
            ClaimResponse::Completed {
                response: sample_response()
            }
        );
    }
    let woken = a.longpoll.rechecks();
    // One settle, one shared read (a second notification, e.g. after a
    // reconnect, could add one more); never a claim per follower.
    assert!(
        woken.reads - parked.reads <= 2,
        "{} reads for one settle",
        woken.reads - parked.reads
    );
    assert_eq!(woken.claims, 0);
    assert_eq!(a.longpoll.waiting(), 0);
}

#[tokio::test]
async fn a_follower_on_a_record_past_retention_claims_it() {
    let a = replica().await;
    let scope = fresh_scope();
    let req = waiting_req("expired record", 30_000);
    let (claim_id, _, _) = must_win(&a.store, &scope, &req).await;
    a.store
        .finalize(&scope, finalize_ok(claim_id))
        .await
        .unwrap();
    age_past_retention(&raw_client(&cluster().url()).await, &scope).await;

    // The read alone would say `completed`; past retention the claim reuses the record.
    let answer = claim_with_wait(&a.store, &a.longpoll, &scope, &req)
        .await
        .unwrap();
    assert!(
        matches!(
            answer,
            ClaimResponse::Won {
                how: WonHow::RecoveredTtl,
                ..
            }
        ),
        "got {answer:?}"
    );
    assert_eq!(a.longpoll.rechecks().claims, 1);
}

/// A raw `LISTEN keyflight_settled` connection (keep the client alive) and
/// the scopes it hears announced, in commit order.
async fn listen_raw() -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    use futures_util::StreamExt as _;
    let (client, mut connection) = tokio_postgres::connect(&cluster().url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client
        .batch_execute("LISTEN keyflight_settled")
        .await
        .unwrap();
    (client, rx)
}

#[tokio::test]
async fn only_a_watched_record_announces_its_settle() {
    let a = replica().await;
    let (_listening, mut announced) = listen_raw().await;
    let req = claim_req(fingerprint("watch"), 30_000);

    // Nobody follows this one: its finalize must not NOTIFY (NOTIFY serializes commits).
    let quiet = fresh_scope();
    let (quiet_claim, _, _) = must_win(&a.store, &quiet, &req).await;
    a.store
        .finalize(&quiet, finalize_ok(quiet_claim))
        .await
        .unwrap();

    // A follower's check marks this one; its finalize must NOTIFY.
    let watched = fresh_scope();
    let (watched_claim, _, _) = must_win(&a.store, &watched, &req).await;
    let seen = a.store.watch_and_read(&watched).await.unwrap();
    assert!(
        seen.is_some(),
        "the follower's read sees the pending record"
    );
    a.store
        .finalize(&watched, finalize_ok(watched_claim))
        .await
        .unwrap();

    // Notifications arrive in commit order: had the quiet finalize notified,
    // its scope would come before the watched one. Other tests of this binary
    // share the cluster and its channel, so their scopes are skipped.
    let (quiet, watched) = (quiet.to_hex(), watched.to_hex());
    loop {
        let scope = tokio::time::timeout(SETTLE, announced.recv())
            .await
            .expect("the watched settle is announced")
            .unwrap();
        assert_ne!(scope, quiet, "an unwatched settle was announced");
        if scope == watched {
            break;
        }
    }
}

#[tokio::test]
async fn the_listener_task_ends_at_shutdown() {
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, listener) = LongPoll::start(&cluster().url(), shutdown_rx);
    eventually("the LISTEN connection is up", SETTLE, || async {
        longpoll.listening()
    })
    .await;
    shutdown.send_replace(true);
    tokio::time::timeout(SETTLE, listener)
        .await
        .expect("the listener stops when shutdown begins")
        .expect("and ends without a panic");
}
