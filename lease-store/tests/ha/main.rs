//! L10 against a real replicated Postgres (etcd + two Patroni nodes, synchronous mode): the
//! lease-store follows the primary through a failover without a restart, fails closed while
//! there is none, and loses nothing it acknowledged.
//!
//! The store is given the multi-host URL with `target_session_attrs=read-write`. Each test
//! starts its own cluster (`keyflight_testkit::ha`, about ten seconds) because each one
//! kills or moves the primary. Needs `patroni` and `etcd` (`make ha-prereqs`).

#![allow(clippy::unwrap_used)]

// The HA tests use part of the store and HTTP binaries' support: shared by path, not copied.
#[allow(dead_code)]
#[path = "../http/support.rs"]
mod http_support;
#[allow(dead_code)]
#[path = "../store/support.rs"]
mod store_support;

use std::io::Write as _;
use std::time::{Duration, Instant};

use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{Store, StoreError, migrate_partitioned, slot_of};
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse};
use keyflight_testkit::ha::{HaCluster, HaOptions};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::eventually;
use serde_json::{Value, json};
use tokio::sync::watch;

/// Longest a failover (or a switchover, or a crash-restart) may take here.
const FAILOVER: Duration = Duration::from_secs(60);

/// How long the listener may take to connect, or a follower to park.
const SETTLE: Duration = Duration::from_secs(20);

/// Pacing of the loops that retry until the new primary answers.
const RETRY_PACE: Duration = Duration::from_millis(50);

/// Writes past the test harness's output capture: the measured windows are the point.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Claims a fresh scope over HTTP with `lease_ms`; returns the answer.
async fn claim_fresh(api: &http_support::Api, lease_ms: u64) -> http_support::Answer {
    claim(api, &http_support::fresh_digest("ha"), "fp-ha", lease_ms).await
}

async fn claim(
    api: &http_support::Api,
    scope: &str,
    fingerprint_label: &str,
    lease_ms: u64,
) -> http_support::Answer {
    let fingerprint = keyflight_protocol::Digest::of(fingerprint_label.as_bytes()).to_hex();
    api.post(
        &format!("/v1/claims/{scope}"),
        Some(http_support::TOKEN),
        &json!({ "fingerprint": fingerprint, "lease_ms": lease_ms }),
    )
    .await
}

fn fence_of(answer: &http_support::Answer) -> i64 {
    assert_eq!(answer.outcome(), "won", "{}", answer.text);
    answer.json["fence"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_fail_closed_during_a_failover_and_succeed_on_the_new_primary_without_a_restart() {
    let ha = HaCluster::start(HaOptions::default()).await;
    http_support::migrate(&ha.url());
    let server = http_support::start_server_on(&ha.url(), &["--statement-timeout", "2s"]).await;
    let api = &server.api;

    // Acknowledged before the failover: twenty claims, and one whose short lease will have
    // run out by the time a new primary answers (its winner's proxy is still retrying).
    let mut acknowledged = Vec::new();
    for _ in 0..20 {
        let scope = http_support::fresh_digest("before");
        let answer = claim(api, &scope, "fp-before", 60_000).await;
        acknowledged.push((scope, fence_of(&answer)));
    }
    let stranded = http_support::fresh_digest("stranded");
    let stranded_fence = fence_of(&claim(api, &stranded, "fp-stranded", 1_000).await);
    let highest_before = acknowledged
        .iter()
        .map(|(_, fence)| *fence)
        .chain([stranded_fence])
        .max()
        .unwrap();

    let killed_at = Instant::now();
    let old_leader = ha.kill_primary_node().await;

    // The window: every claim fails closed, and /readyz says so at once.
    let mut first_refusal = None;
    let (first_success, sent, fence_after) = loop {
        assert!(
            killed_at.elapsed() < FAILOVER,
            "no claim succeeded within {FAILOVER:?} of the primary's death"
        );
        let sent = Instant::now();
        let answer = claim_fresh(api, 60_000).await;
        if answer.status == 200 {
            break (Instant::now(), sent, fence_of(&answer));
        }
        answer.assert_problem(503, "journal_unavailable");
        if first_refusal.is_none() {
            first_refusal = Some(Instant::now());
            let asked = Instant::now();
            let ready = api.get("/readyz", None).await;
            ready.assert_problem(503, "journal_unavailable");
            assert!(
                asked.elapsed() < Duration::from_millis(2_250),
                "/readyz without a primary answers within the statement timeout, took {:?}",
                asked.elapsed()
            );
        }
        tokio::time::sleep(RETRY_PACE).await;
    };
    let first_refusal = first_refusal.expect("the failover window refused at least one claim");
    let new_leader = ha.leader().await;
    report(&format!(
        "lease-store failover window (first 503 to first won claim): {} ms; kill to first won \
         claim: {} ms; node {old_leader} killed, new leader {new_leader:?}",
        first_success.duration_since(first_refusal).as_millis(),
        first_success.duration_since(killed_at).as_millis(),
    ));
    assert!(new_leader.is_some_and(|leader| leader != old_leader));

    // Fences keep increasing: the sequence was WAL-logged ahead of every value handed out.
    assert!(
        fence_after > highest_before,
        "fence {fence_after} after the failover must exceed {highest_before}, the highest acknowledged before it"
    );
    // Nothing acknowledged was lost: synchronous replication had every claim on the standby.
    for (scope, fence) in &acknowledged {
        let record = server
            .admin
            .get(&format!("/v1/records/{scope}"), Some(http_support::ADMIN))
            .await;
        assert_eq!(
            record.status, 200,
            "claim {scope} vanished: {}",
            record.text
        );
        assert_eq!(record.json["state"], "pending", "{}", record.text);
        assert_eq!(record.json["fence"], Value::from(*fence), "{}", record.text);
    }
    assert_eq!(api.get("/readyz", None).await.status, 200);

    // The takeover grace started when the new primary first answered: the stranded claim's
    // lease ran out during the window, yet no retry takes it over until the grace is over
    // (its winner's outbox lands the record first). Then a dead winner is taken over.
    let during = claim(api, &stranded, "fp-stranded", 1_000).await;
    assert_eq!(during.outcome(), "in_progress", "{}", during.text);
    let taken_over = loop {
        let answer = claim(api, &stranded, "fp-stranded", 1_000).await;
        if answer.outcome() == "won" {
            break answer;
        }
        assert_eq!(answer.outcome(), "in_progress", "{}", answer.text);
        assert!(sent.elapsed() < Duration::from_secs(30), "never taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(taken_over.json["how"], "recovered_abandoned");
    assert!(
        sent.elapsed() >= Duration::from_millis(4_500),
        "taken over {:?} after the first answer, inside the 5 s grace",
        sent.elapsed()
    );
    assert!(fence_of(&taken_over) > fence_after);
}

/// One lease-store's store and listener on the HA cluster, as `serve` builds them.
struct Replica {
    store: Store,
    longpoll: LongPoll,
    _shutdown: watch::Sender<bool>,
}

async fn replica(url: &str, pool_size: usize) -> Replica {
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(url, shutdown_rx);
    eventually("the LISTEN connection is up", SETTLE, || async {
        longpoll.listening()
    })
    .await;
    let settings = keyflight_lease_store::store::StoreSettings {
        pool_size,
        ..store_support::settings(url)
    };
    Replica {
        store: Store::connect(&settings).await.unwrap(),
        longpoll,
        _shutdown: shutdown,
    }
}

/// Retries `call` (paced) while the database is unavailable, as the filter's outbox does.
async fn until_answered<T>(
    what: &str,
    mut call: impl AsyncFnMut() -> Result<T, StoreError>,
) -> (T, usize) {
    let deadline = Instant::now() + FAILOVER;
    let mut refused = 0;
    loop {
        match call().await {
            Ok(value) => return (value, refused),
            Err(StoreError::Unavailable(_) | StoreError::ReadOnly(_)) => refused += 1,
            Err(other) => panic!("{what}: {other}"),
        }
        assert!(Instant::now() < deadline, "{what}: never answered");
        tokio::time::sleep(RETRY_PACE).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_parked_before_a_failover_is_answered_by_a_finalize_after_it() {
    let ha = HaCluster::start(HaOptions::default()).await;
    store_support::migrate_blocking(&ha.url());
    let replica = replica(&ha.url(), 4).await;
    let scope = store_support::fresh_scope();
    let req = ClaimRequest {
        wait_ms: Some(60_000),
        ..store_support::claim_req(store_support::fingerprint("parked"), 60_000)
    };
    let (claim_id, _, _) = store_support::must_win(&replica.store, &scope, &req).await;
    let follower = {
        let (store, longpoll, req) = (replica.store.clone(), replica.longpoll.clone(), req.clone());
        tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &req).await })
    };
    eventually("the follower parked", SETTLE, || async {
        replica.longpoll.waiting() == 1
    })
    .await;

    let failover = ha.fail_primary_node(FAILOVER).await;
    report(&format!("long-poll test: {failover}"));
    // The winner's proxy resends its finalize until the new primary takes it.
    let ((), _) = until_answered("finalize", async || {
        replica
            .store
            .finalize(&scope, store_support::finalize_ok(claim_id))
            .await
    })
    .await;
    let finalized_at = Instant::now();

    let answer = tokio::time::timeout(SETTLE, follower)
        .await
        .expect("the parked follower answered")
        .unwrap()
        .unwrap();
    assert_eq!(
        answer,
        ClaimResponse::Completed {
            response: store_support::sample_response()
        }
    );
    // Its lease and its wait both had most of a minute left: only the listener, back on the
    // new primary (a notification, or the re-check every reconnect triggers), explains this.
    assert!(
        finalized_at.elapsed() < Duration::from_secs(15),
        "answered {:?} after the finalize",
        finalized_at.elapsed()
    );
    assert!(replica.longpoll.listening());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_and_a_postmaster_crash_leave_no_pooled_connection_behind() {
    let ha = HaCluster::start(HaOptions::default()).await;
    store_support::migrate_blocking(&ha.url());
    let (leader, standby) = ha.wait_for_leader_and_sync_standby(FAILOVER).await;
    let replica = replica(&ha.url(), 4).await;
    let req = store_support::claim_req(store_support::fingerprint("switch"), 60_000);
    // Fill the pool: four claims, then four readiness checks at once, each holding a
    // connection (concurrent claims may share one batch's), open four connections to the
    // primary.
    let warm = futures_util::future::join_all((0..4).map(|_| async {
        let scope = store_support::fresh_scope();
        store_support::must_win(&replica.store, &scope, &req).await
    }))
    .await;
    assert_eq!(warm.len(), 4);
    futures_util::future::join_all((0..4).map(|_| replica.store.readiness()))
        .await
        .into_iter()
        .for_each(|ready| ready.unwrap());
    assert_eq!(replica.store.pool_status().size, 4);

    // A planned switchover demotes the primary (Postgres restarts as a standby).
    let started = Instant::now();
    ha.switchover(standby, FAILOVER).await;
    let (_, refused) = until_answered("a claim after the switchover", async || {
        replica
            .store
            .claim(&store_support::fresh_scope(), &req)
            .await
    })
    .await;
    report(&format!(
        "switchover: first claim won {} ms after it started ({refused} refused)",
        started.elapsed().as_millis()
    ));
    // Every pooled connection now talks to the new primary: none is reused on the old one.
    let scope = store_support::fresh_scope();
    for _ in 0..8 {
        let scope = store_support::fresh_scope();
        store_support::must_win(&replica.store, &scope, &req).await;
    }
    store_support::must_win(&replica.store, &scope, &req).await;
    let on_new = store_support::raw_client(&ha.node_url(standby)).await;
    assert!(
        store_support::row_state(&on_new, &scope).await.is_some(),
        "written on the new primary"
    );

    // A crash-restart: only the postmaster dies, its agent restarts it in place (no
    // failover). Once it has, every pooled connection's backend is gone with the old one.
    let crashed = Instant::now();
    let old_postmaster = ha.kill_postmaster(standby);
    ha.wait_for_postmaster_restart(standby, old_postmaster, FAILOVER)
        .await;
    let restarted = crashed.elapsed();
    let (_, refused) = until_answered("a claim after the crash-restart", async || {
        replica
            .store
            .claim(&store_support::fresh_scope(), &req)
            .await
    })
    .await;
    report(&format!(
        "postmaster crash-restart: restarted after {} ms, first claim won {} ms after the kill \
         ({refused} refused)",
        restarted.as_millis(),
        crashed.elapsed().as_millis()
    ));
    assert_eq!(ha.leader().await, Some(standby), "restarted in place");
    assert_ne!(leader, standby);
    for _ in 0..8 {
        let scope = store_support::fresh_scope();
        store_support::must_win(&replica.store, &scope, &req).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_that_missed_acknowledged_claims_is_never_promoted() {
    // Without synchronous_mode_strict (the two-node cluster's choice, docs/failover.md), a
    // primary whose standby is gone commits alone. That is safe only because Patroni then
    // takes the standby out of the synchronous set first, so it may not be promoted: here the
    // standby dies, a claim is acknowledged by the lone primary, the primary dies, and the
    // standby comes back. It must not lead (it lacks the claim); the old primary, back, does.
    let ha = HaCluster::start(HaOptions::default()).await;
    store_support::migrate_blocking(&ha.url());
    let (leader, standby) = ha.wait_for_leader_and_sync_standby(FAILOVER).await;
    let replica = replica(&ha.url(), 2).await;
    let req = store_support::claim_req(store_support::fingerprint("alone"), 60_000);

    ha.kill_node(standby);
    // Commits wait for the lost standby until Patroni drops it from the synchronous set.
    until_answered("a claim on the lone primary", async || {
        replica
            .store
            .claim(&store_support::fresh_scope(), &req)
            .await
    })
    .await;
    let alone = store_support::fresh_scope();
    store_support::must_win(&replica.store, &alone, &req).await;

    ha.kill_node(leader);
    ha.restart_node(standby).await;
    // Two leader-key lifetimes: ample for a promotion, were one allowed. (Until the dead
    // primary's key expires, etcd still names it leader.)
    let watched_until = Instant::now() + Duration::from_secs(2 * 6 + 2);
    while Instant::now() < watched_until {
        assert_ne!(
            ha.leader().await,
            Some(standby),
            "a standby without every acknowledged commit was promoted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let writable = tokio_postgres::connect(&ha.url(), tokio_postgres::NoTls).await;
    assert!(
        writable.is_err(),
        "no node takes writes while the primary is down"
    );

    ha.restart_node(leader).await;
    let deadline = Instant::now() + FAILOVER;
    while ha.leader().await != Some(leader) {
        assert!(
            Instant::now() < deadline,
            "the old primary did not lead again"
        );
        tokio::time::sleep(RETRY_PACE).await;
    }
    ha.wait_writable(FAILOVER).await;
    let on_leader = store_support::raw_client(&ha.node_url(leader)).await;
    assert!(
        store_support::row_state(&on_leader, &alone).await.is_some(),
        "the claim acknowledged by the lone primary survived"
    );
}

/// A fresh scope that partition `p` of `n` owns (slot `s` is partition `s mod n` on a fresh
/// router: `docs/distributed-sql.md#what-runs-where`).
fn scope_on_partition(p: usize, n: usize) -> keyflight_protocol::Digest {
    loop {
        let scope = store_support::fresh_scope();
        if slot_of(&scope.0) % n == p {
            return scope;
        }
    }
}

/// A partition on a Patroni pair fails over like one database does: the router reaches
/// the pair by a multi-host connection string that asks for the primary, so after the
/// primary's node dies its scopes fail closed, then work on the promoted standby with
/// every acknowledged record there; the other partition never notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_on_a_patroni_pair_fails_over_and_loses_nothing() {
    let ha = HaCluster::start(HaOptions::default()).await;
    let (router, single) = tokio::task::spawn_blocking(|| (PgCluster::start(), PgCluster::start()))
        .await
        .unwrap();
    let partitions = vec![ha.url(), single.url()];
    migrate_partitioned(&router.url(), &partitions, None)
        .await
        .unwrap();
    let settings = keyflight_lease_store::store::StoreSettings {
        partitions: partitions.clone(),
        ..store_support::settings(&router.url())
    };
    let store = Store::connect(&settings).await.unwrap();
    let req = |label: &str| store_support::claim_req(store_support::fingerprint(label), 60_000);
    let mut settled = Vec::new();
    for i in 0..8 {
        let scope = scope_on_partition(0, 2);
        let (claim_id, _, _) = store_support::must_win(&store, &scope, &req("ha partition")).await;
        store
            .finalize(&scope, store_support::finalize_ok(claim_id))
            .await
            .unwrap();
        settled.push(scope);
        report(&format!("settled {i} on the Patroni partition"));
    }
    let running = scope_on_partition(0, 2);
    let (running_claim, _, _) = store_support::must_win(&store, &running, &req("running")).await;

    let failover = ha.fail_primary_node(FAILOVER).await;
    report(&format!(
        "partition 0 failed over in {:?}",
        failover.window()
    ));
    let other = scope_on_partition(1, 2);
    store_support::must_win(&store, &other, &req("other partition")).await;
    let (answer, refused) = until_answered("a claim on the failed-over partition", async || {
        store.claim(&scope_on_partition(0, 2), &req("after")).await
    })
    .await;
    assert!(matches!(answer.response, ClaimResponse::Won { .. }));
    report(&format!("{refused} claims refused during the failover"));
    for scope in &settled {
        assert_eq!(
            store
                .claim(scope, &req("ha partition"))
                .await
                .unwrap()
                .response,
            ClaimResponse::Completed {
                response: store_support::sample_response()
            },
            "an acknowledged record survived the failover"
        );
    }
    assert!(matches!(
        store
            .claim(&running, &req("running"))
            .await
            .unwrap()
            .response,
        ClaimResponse::InProgress { .. }
    ));
    store
        .finalize(&running, store_support::finalize_ok(running_claim))
        .await
        .unwrap();
}
