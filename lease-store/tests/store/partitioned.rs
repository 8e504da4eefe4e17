//! A partitioned database: three Postgres partitions behind a PL/Proxy router
//! (`docs/distributed-sql.md#plproxy-partitioned-postgres`). The store runs the same
//! statements, each on the partition that owns its scope; every guarantee of one database
//! must hold, and one partition's outage must fail only the scopes it owns.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{
    RuntimeRole, SLOTS, Store, StoreError, migrate_partitioned, move_slot, slot_of,
};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimResponse, PreviousIdentity, ReleaseAs, ReleaseRequest, RenewRequest, WonHow,
};
use keyflight_testkit::pg::PgCluster;
use keyflight_testkit::process::eventually;
use tokio::sync::{Barrier, watch};

/// A router and its partitions.
struct Partitioned {
    router: PgCluster,
    partitions: Vec<PgCluster>,
}

impl Partitioned {
    /// A router over `n` fresh partitions, migrated.
    fn start(n: usize) -> Partitioned {
        let partitioned = Partitioned {
            router: PgCluster::start(),
            partitions: (0..n).map(|_| PgCluster::start()).collect(),
        };
        let (router, partitions) = (partitioned.router.url(), partitioned.partition_urls());
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(migrate_partitioned(&router, &partitions, None))
                .unwrap()
        })
        .join()
        .unwrap();
        partitioned
    }

    fn partition_urls(&self) -> Vec<String> {
        self.partitions.iter().map(PgCluster::url).collect()
    }

    async fn store(&self) -> Store {
        let settings = keyflight_lease_store::store::StoreSettings {
            partitions: self.partition_urls(),
            ..settings(&self.router.url())
        };
        Store::connect(&settings).await.unwrap()
    }

    /// The partition that owns `scope`: its slot's, slot `s` being partition `s mod n`.
    fn owner(&self, scope: &Digest) -> usize {
        slot_of(&scope.0) % self.partitions.len()
    }

    /// How many records partition `p` holds among `scopes`.
    async fn held_by(&self, p: usize, scopes: &[Digest]) -> usize {
        records_among(&self.partitions[p], scopes).await
    }
}

/// How many records `cluster` holds among `scopes`.
async fn records_among(cluster: &PgCluster, scopes: &[Digest]) -> usize {
    let db = raw_client(&cluster.url()).await;
    let scopes: Vec<&[u8]> = scopes.iter().map(|s| s.0.as_slice()).collect();
    let row = db
        .query_one(
            "SELECT count(*) FROM keyflight_records WHERE scope = ANY($1)",
            &[&scopes],
        )
        .await
        .unwrap();
    usize::try_from(row.get::<_, i64>(0)).unwrap()
}

/// The binary's partitioned database: three partitions, shared by the tests that never
/// stop one.
fn three() -> &'static Partitioned {
    static THREE: OnceLock<Partitioned> = OnceLock::new();
    THREE.get_or_init(|| Partitioned::start(3))
}

/// A fresh scope owned by partition `p` of `db`.
fn scope_on(db: &Partitioned, p: usize) -> Digest {
    loop {
        let scope = fresh_scope();
        if db.owner(&scope) == p {
            return scope;
        }
    }
}

#[tokio::test]
async fn racers_on_one_scope_get_one_winner_on_every_partition() {
    let db = three();
    let store = db.store().await;
    for p in 0..db.partitions.len() {
        let scope = scope_on(db, p);
        let req = claim_req(fingerprint("race"), 30_000);
        let barrier = Arc::new(Barrier::new(32));
        let racers: Vec<_> = (0..32)
            .map(|_| {
                let (store, barrier, req) = (store.clone(), Arc::clone(&barrier), req.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(&scope, &req).await.unwrap().response
                })
            })
            .collect();
        let mut won = 0;
        for racer in racers {
            match racer.await.unwrap() {
                ClaimResponse::Won { .. } => won += 1,
                ClaimResponse::InProgress { .. } => {}
                other => panic!("partition {p}: unexpected answer {other:?}"),
            }
        }
        assert_eq!(won, 1, "partition {p}: exactly one winner among 32 racers");
        assert_eq!(
            db.held_by(p, &[scope]).await,
            1,
            "the record is on its owner"
        );
    }
}

#[tokio::test]
async fn every_record_lives_on_the_partition_its_slot_names() {
    let db = three();
    let store = db.store().await;
    let scopes: Vec<Digest> = (0..90).map(|_| fresh_scope()).collect();
    let mut fences = Vec::new();
    for scope in &scopes {
        let (_, fence, _) =
            must_win(&store, scope, &claim_req(fingerprint("spread"), 30_000)).await;
        let stride = i64::try_from(SLOTS).unwrap();
        let owner = i64::try_from(db.owner(scope)).unwrap();
        assert_eq!(
            fence % stride,
            owner + 1,
            "each partition hands out its own fences"
        );
        fences.push(fence);
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        scopes.len(),
        "a fence names one claim across partitions"
    );
    for p in 0..db.partitions.len() {
        let owned: Vec<Digest> = scopes
            .iter()
            .copied()
            .filter(|s| db.owner(s) == p)
            .collect();
        assert!(!owned.is_empty(), "partition {p} owns some of 90 scopes");
        assert_eq!(db.held_by(p, &owned).await, owned.len(), "partition {p}");
        assert_eq!(db.held_by(p, &scopes).await, owned.len(), "and no others");
    }
}

#[tokio::test]
async fn a_record_is_claimed_renewed_settled_and_replayed_through_the_router() {
    let db = three();
    let store = db.store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("lifecycle"), 30_000);
    let (claim_id, fence, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::Claimed);
    assert!(fence > 0);
    store
        .renew(
            &scope,
            &RenewRequest {
                claim_id,
                lease_ms: 30_000,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::InProgress { .. }
    ));
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    // The outbox's repeat is recognised through the router too.
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    assert_eq!(
        store
            .claim(&scope, &claim_req(fingerprint("another body"), 30_000))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );
    let detail = store.get(&scope).await.unwrap();
    assert_eq!(detail.summary.fence, fence);

    let cooled = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &cooled, &req).await;
    let released = store
        .release(
            &cooled,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Cooldown,
                cooldown_ms: Some(5_000),
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    assert!(released.cooldown_ends_at.is_some(), "the stamps come back");
}

/// The operator epoch is mesh-wide: an erase on any partition changes it, so every edge
/// cache drops what it holds (F9).
#[tokio::test]
async fn an_erase_on_any_partition_moves_the_mesh_wide_epoch() {
    let db = three();
    let store = db.store().await;
    for p in 0..db.partitions.len() {
        let scope = scope_on(db, p);
        let (claim_id, _, _) =
            must_win(&store, &scope, &claim_req(fingerprint("erased"), 30_000)).await;
        store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
        let before = store.epoch().await.unwrap();
        store.erase(&scope, "ops", "test").await.unwrap();
        assert!(
            store.epoch().await.unwrap() > before,
            "an erase on partition {p} moves the epoch"
        );
    }
}

#[tokio::test]
async fn the_operators_list_and_cleanup_cover_every_partition() {
    let db = three();
    let store = db.store().await;
    let scopes: Vec<Digest> = (0..db.partitions.len()).map(|p| scope_on(db, p)).collect();
    for scope in &scopes {
        let mut req = claim_req(fingerprint("listed"), 30_000);
        req.retention_s = Some(1);
        let (claim_id, _, _) = must_win(&store, scope, &req).await;
        store.finalize(scope, finalize_ok(claim_id)).await.unwrap();
    }
    let listed = store.list(None, 1000).await.unwrap();
    for scope in &scopes {
        assert!(
            listed.records.iter().any(|r| r.scope == *scope),
            "the list shows partition {}'s record",
            db.owner(scope)
        );
    }
    let newest_first = listed
        .records
        .windows(2)
        .all(|pair| pair[0].created_at >= pair[1].created_at);
    assert!(newest_first, "the merged list is newest first");
    eventually(
        "cleanup emptied every partition's expired records",
        Duration::from_secs(10),
        || async {
            store.delete_expired_batch(1000).await.unwrap();
            let mut left = 0;
            for p in 0..db.partitions.len() {
                left += db.held_by(p, &scopes).await;
            }
            left == 0
        },
    )
    .await;
}

/// A follower parked on a scope is woken by its partition's `NOTIFY`: the long-poll listens
/// on every partition, not on the router.
#[tokio::test]
async fn a_follower_is_woken_by_its_own_partitions_settle() {
    let db = three();
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) =
        LongPoll::start_capped(&db.partition_urls(), Default::default(), shutdown_rx);
    let settle = Duration::from_secs(10);
    eventually(
        "every partition's LISTEN connection is up",
        settle,
        || async { longpoll.listening() },
    )
    .await;
    let store = db.store().await;
    for p in 0..db.partitions.len() {
        let scope = scope_on(db, p);
        let req = claim_req(fingerprint("followed"), 30_000);
        let (claim_id, _, _) = must_win(&store, &scope, &req).await;
        let mut waiting = req.clone();
        waiting.wait_ms = Some(30_000);
        let follower = {
            let (store, longpoll) = (store.clone(), longpoll.clone());
            tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &waiting).await })
        };
        eventually("the follower parked", settle, || async {
            longpoll.waiting() == 1
        })
        .await;
        let finalized_at = Instant::now();
        store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
        assert_eq!(
            follower.await.unwrap().unwrap(),
            ClaimResponse::Completed {
                response: sample_response()
            }
        );
        assert!(
            finalized_at.elapsed() < Duration::from_secs(5),
            "partition {p}: woken by the settle, not by the 30 s lease"
        );
    }
}

/// No transaction spans two partitions, so a claim across a recipe change is refused
/// rather than half-made.
#[tokio::test]
async fn a_claim_on_two_scopes_is_refused() {
    let db = three();
    let store = db.store().await;
    let mut req = claim_req(fingerprint("dual"), 30_000);
    req.previous = Some(PreviousIdentity {
        scope: fresh_scope(),
        fingerprint: fingerprint("dual, v1"),
    });
    assert!(matches!(
        store.claim(&fresh_scope(), &req).await,
        Err(StoreError::Invalid(_))
    ));
}

/// One partition down fails closed the scopes it owns, and only those; when it is back,
/// they work again.
#[tokio::test]
async fn a_partition_down_fails_only_the_scopes_it_owns() {
    let db = Partitioned::start(2);
    let store = db.store().await;
    let req = claim_req(fingerprint("outage"), 30_000);
    db.partitions[1].stop();
    let on_the_dead = scope_on(&db, 1);
    assert!(matches!(
        store.claim(&on_the_dead, &req).await,
        Err(StoreError::Unavailable(_))
    ));
    for _ in 0..5 {
        must_win(&store, &scope_on(&db, 0), &req).await;
    }
    db.partitions[1].restart();
    eventually(
        "the partition serves again",
        Duration::from_secs(20),
        || async { store.claim(&on_the_dead, &req).await.is_ok() },
    )
    .await;
}

/// A fresh scope in `slot`.
fn scope_in_slot(slot: usize) -> Digest {
    loop {
        let scope = fresh_scope();
        if slot_of(&scope.0) == slot {
            return scope;
        }
    }
}

/// Adding a partition (`docs/distributed-sql.md#adding-a-partition`): it joins owning no
/// slot; a slot moved to it fails closed while parked, arrives with its records (a settled
/// one replays, a running one stays running and its winner's finalize lands), and new
/// claims there get fences above the old ones. No scope is ever claimable on two partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_moves_to_a_new_partition_with_its_records() {
    let db = Partitioned::start(2);
    let store = db.store().await;
    let slot = 5;
    let req = claim_req(fingerprint("moved"), 60_000);
    let (settled, running) = (scope_in_slot(slot), scope_in_slot(slot));
    let (settled_claim, settled_fence, _) = must_win(&store, &settled, &req).await;
    store
        .finalize(&settled, finalize_ok(settled_claim))
        .await
        .unwrap();
    let (running_claim, running_fence, _) = must_win(&store, &running, &req).await;

    let third = PgCluster::start();
    let mut urls = db.partition_urls();
    urls.push(third.url());
    let router = db.router.url();
    let report = migrate_partitioned(&router, &urls, None).await.unwrap();
    assert_eq!(
        report.slots,
        vec![SLOTS / 2, SLOTS / 2, 0],
        "a new partition owns no slot"
    );
    let mut reordered = urls.clone();
    reordered.swap(0, 1);
    assert!(
        matches!(
            migrate_partitioned(&router, &reordered, None).await,
            Err(StoreError::Invalid(_))
        ),
        "a list that would hand another partition's fences out is refused"
    );

    let mover = {
        let (router, urls) = (router.clone(), urls.clone());
        tokio::spawn(
            async move { move_slot(&router, &urls, slot, 2, Duration::from_secs(2)).await },
        )
    };
    let probe = scope_in_slot(slot);
    eventually("the slot is parked", Duration::from_secs(10), || async {
        matches!(store.get(&probe).await, Err(StoreError::Unavailable(_)))
    })
    .await;
    assert!(
        matches!(
            store.claim(&scope_in_slot(slot), &req).await,
            Err(StoreError::Unavailable(_))
        ),
        "a parked slot's scopes fail closed"
    );
    let moved = mover.await.unwrap().unwrap();
    assert_eq!((moved.from, moved.to, moved.copied), (Some(1), 2, 2));

    assert_eq!(
        records_among(&third, &[settled, running]).await,
        2,
        "the records are on the new partition"
    );
    assert_eq!(
        db.held_by(1, &[settled, running]).await,
        0,
        "and nowhere else"
    );
    assert_eq!(
        store.claim(&settled, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    assert!(matches!(
        store.claim(&running, &req).await.unwrap().response,
        ClaimResponse::InProgress { .. }
    ));
    store
        .finalize(&running, finalize_ok(running_claim))
        .await
        .unwrap();
    let (_, fence, _) = must_win(&store, &scope_in_slot(slot), &req).await;
    let stride = i64::try_from(SLOTS).unwrap();
    assert_eq!(fence % stride, 3, "the new partition's own fences");
    assert!(
        fence > settled_fence.max(running_fence),
        "above every moved fence"
    );
    // Run again, the move changes nothing.
    let again = move_slot(&router, &urls, slot, 2, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((again.copied, again.cleaned), (0, 0));
}

/// Least privilege on a partitioned database: with `--grant-runtime`, the runtime role alone
/// may call the routed functions, and the router reaches the partitions as that role (not
/// as the owner that migrated them), so a routed statement has the runtime role's rights.
#[tokio::test]
async fn the_router_runs_the_statements_as_the_runtime_role_and_only_for_it() {
    let db = Partitioned::start(2);
    for cluster in std::iter::once(&db.router).chain(&db.partitions) {
        cluster.psql("CREATE ROLE keyflight_app LOGIN; CREATE ROLE intruder LOGIN");
    }
    let runtime = RuntimeRole {
        role: "keyflight_app".into(),
        password: None,
    };
    migrate_partitioned(&db.router.url(), &db.partition_urls(), Some(&runtime))
        .await
        .unwrap();
    let as_role = |url: String, role: &str| url.replacen("postgres@", &format!("{role}@"), 1);
    let settings = keyflight_lease_store::store::StoreSettings {
        partitions: db
            .partitions
            .iter()
            .map(|p| as_role(p.url(), "keyflight_app"))
            .collect(),
        ..settings(&as_role(db.router.url(), "keyflight_app"))
    };
    let store = Store::connect(&settings).await.unwrap();
    store.readiness().await.unwrap();
    let scope = fresh_scope();
    let req = claim_req(fingerprint("least privilege"), 30_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );

    let owner = db.partitions[db.owner(&scope)].psql(
        "SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity \
          WHERE backend_type = 'client backend' AND usename <> 'postgres'",
    );
    assert_eq!(
        owner.trim(),
        "keyflight_app",
        "the router's sessions on the partition"
    );
    let intruder = raw_client(&as_role(db.router.url(), "intruder")).await;
    let denied = intruder
        .query("SELECT * FROM keyflight_read($1)", &[&scope.0.as_slice()])
        .await
        .unwrap_err();
    assert_eq!(
        denied.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{denied}"
    );
}
