//! A partitioned database: three Postgres partitions behind a PL/Proxy router
//! (`docs/distributed-sql.md#plproxy-partitioned-postgres`). The store runs the same
//! statements, each on the partition that owns its scope; every guarantee of one database
//! must hold, and one partition's outage must fail only the scopes it owns.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{
    BatchKind, ClaimAttempt, MAX_RELEASES_IN_FLIGHT, RuntimeRole, SLOTS, Store, StoreError,
    migrate_partitioned, move_slot, slot_of,
};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, PreviousIdentity, ReleaseAs, ReleaseRequest, RenewRequest, WonHow,
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

/// On a new installation each partition's table is empty when PL/Proxy's sessions first
/// plan the statements by scope, and those plans are kept; none of them may scan the
/// whole table (`docs/postgres-facts.md#plans-made-on-a-young-table`).
#[tokio::test]
async fn statements_planned_on_an_empty_partition_never_scan_its_table() {
    let db = Partitioned::start(1);
    let partition = raw_client(&db.partitions[0].url()).await;
    // The migration's sessions scanned the table; count from when they are gone (a
    // session reports its scans before it leaves `pg_stat_activity`).
    eventually(
        "the migration's sessions ended",
        Duration::from_secs(10),
        || async {
            let others: i64 = partition
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()
                        AND backend_type = 'client backend'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            others == 0
        },
    )
    .await;
    partition
        .batch_execute(
            "ANALYZE keyflight_records;
             SELECT pg_stat_reset_single_table_counters('keyflight_records'::regclass);",
        )
        .await
        .unwrap();
    let store = db.store().await;
    // Past the fifth run, after which a session keeps one generic plan.
    for _ in 0..8 {
        let scope = fresh_scope();
        let (claim_id, _, _) =
            must_win(&store, &scope, &claim_req(fingerprint("young"), 30_000)).await;
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
        store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
        store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    }
    // An idle session reports its scans within ten seconds; a renew and two
    // finalizes per record are 24 lookups at least.
    let scans = || async {
        let row = partition
            .query_one(
                "SELECT seq_scan, idx_scan FROM pg_stat_user_tables
                  WHERE relname = 'keyflight_records'",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    eventually(
        "the partition's sessions reported their scans",
        Duration::from_secs(30),
        || async {
            let (seq, index) = scans().await;
            seq + index >= 24
        },
    )
    .await;
    assert_eq!(
        scans().await.0,
        0,
        "sequential scans of the partition's table"
    );
    // With sequential scans off, a statement that has only a sequential scan to use (the
    // epoch, or its trigger's update of its one row) is costed past JIT's thresholds:
    // every function that turns them off turns JIT off too.
    let settings: Vec<Vec<String>> = partition
        .query(
            "SELECT proconfig FROM pg_proc
              WHERE proname LIKE 'keyflight\\_%'
                AND proconfig @> ARRAY['enable_seqscan=off']",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        !settings.is_empty(),
        "the partition functions carry the store's planner settings"
    );
    for config in settings {
        assert!(config.contains(&"jit=off".to_owned()), "{config:?}");
    }
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
        // Its audit row is on the scope's partition, and read back through the router.
        let audit = store.audit(&scope).await.unwrap();
        let actions: Vec<(&str, &str, &str)> = audit
            .iter()
            .map(|row| (row.actor.as_str(), row.action.as_str(), row.reason.as_str()))
            .collect();
        assert_eq!(actions, [("ops", "erase", "test")], "partition {p}");
        // Read there through the audit's index by scope (migration V12), as on one database.
        let partition = raw_client(&db.partitions[p].url()).await;
        let indexed: i64 = partition
            .query_one(
                "SELECT count(*) FROM pg_indexes
                  WHERE indexname = 'keyflight_operator_audit_scope_idx'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(indexed, 1, "partition {p}");
    }
}

#[tokio::test]
async fn the_operators_list_and_cleanup_cover_every_partition() {
    let db = three();
    let store = db.store().await;
    let scopes: Vec<Digest> = (0..db.partitions.len()).map(|p| scope_on(db, p)).collect();
    for scope in &scopes {
        let mut req = claim_req(fingerprint("listed"), 1000);
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

/// A release may add a column to what a routed statement returns (the operators' list
/// gained the record's workload): installing it over the last release's functions replaces
/// them, on the router and on every partition, where `CREATE OR REPLACE` alone is refused.
#[tokio::test]
async fn a_statement_that_returns_another_column_installs_over_the_last_release() {
    let db = Partitioned::start(2);
    let older = "DROP FUNCTION keyflight_list(text, bigint); \
                 CREATE FUNCTION keyflight_list(text, bigint) RETURNS TABLE (scope bytea) \
                 LANGUAGE sql AS 'SELECT NULL::bytea WHERE false';";
    for url in std::iter::once(db.router.url()).chain(db.partition_urls()) {
        raw_client(&url).await.batch_execute(older).await.unwrap();
    }
    migrate_partitioned(&db.router.url(), &db.partition_urls(), None)
        .await
        .expect("the new release installs over the last");
    let store = db.store().await;
    let scope = scope_on(&db, 1);
    must_win(&store, &scope, &claim_req(fingerprint("upgraded"), 60_000)).await;
    let listed = store.list(None, 10).await.unwrap();
    assert!(listed.records.iter().any(|r| r.scope == scope));
}

/// A workload's storage quota counts its records on every partition
/// (`docs/records.md#storage-quota`).
#[tokio::test]
async fn a_workloads_usage_sums_every_partition() {
    let db = three();
    let store = db.store().await;
    let workload: Arc<str> = Arc::from("spiffe://cluster.local/ns/quota/sa/partitioned");
    for p in 0..db.partitions.len() {
        let scope = scope_on(db, p);
        let req = claim_req(fingerprint("measured"), 60_000);
        let won = store.claim_as(&scope, &req, Some(&workload)).await.unwrap();
        let ClaimResponse::Won { claim_id, .. } = won.response else {
            panic!("{:?}", won.response)
        };
        store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    }
    let usage = store.workload_usage().await.unwrap();
    let measured = usage
        .iter()
        .find(|(w, _)| w.as_deref() == Some(&*workload))
        .map(|(_, usage)| *usage);
    let body = sample_response().body.len() as u64;
    assert_eq!(
        measured,
        Some(keyflight_lease_store::store::Usage {
            records: 3,
            bytes: 3 * body,
            unknown: 0,
        }),
        "{usage:?}"
    );
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
/// One request under a new recipe (`new`) and its previous one (`old`), their scopes on two
/// partitions, the new one first in byte order when `new_first`.
struct Recipes {
    new: (Digest, Digest),
    old: (Digest, Digest),
}

impl Recipes {
    fn on_two_partitions(db: &Partitioned, new_first: bool, body: &str) -> Recipes {
        loop {
            let (new, old) = (scope_on(db, 0), scope_on(db, 1));
            if (new < old) == new_first {
                return Recipes {
                    new: (new, fingerprint(&format!("new {body}"))),
                    old: (old, fingerprint(&format!("old {body}"))),
                };
            }
        }
    }

    /// A proxy on the new recipe naming the previous one: the dual claim.
    fn dual(&self) -> ClaimRequest {
        let mut req = claim_req(self.new.1, 30_000);
        req.previous = Some(PreviousIdentity {
            scope: self.old.0,
            fingerprint: self.old.1,
        });
        req
    }

    /// A proxy still on the old recipe.
    fn old_only(&self) -> ClaimRequest {
        claim_req(self.old.1, 30_000)
    }

    /// The record of `scope` on its partition: `(state, fence, claim_id)`.
    async fn record(
        &self,
        db: &Partitioned,
        scope: &Digest,
    ) -> Option<(String, i64, Option<uuid::Uuid>)> {
        row_state(
            &raw_client(&db.partitions[db.owner(scope)].url()).await,
            scope,
        )
        .await
    }
}

/// A recipe change on a partitioned database: proxies on the new recipe claim both scopes
/// (on two partitions, so in turn), proxies still on the old one claim theirs, and of all of
/// them exactly one wins, whichever scope comes first; the winner's settles cover both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_across_a_recipe_change_have_one_winner_across_partitions() {
    let db = three();
    let store = db.store().await;
    for new_first in [true, false] {
        let recipes = Arc::new(Recipes::on_two_partitions(db, new_first, "race"));
        let barrier = Arc::new(Barrier::new(32));
        let racers: Vec<_> = (0..32)
            .map(|i| {
                let (store, barrier, recipes) =
                    (store.clone(), Arc::clone(&barrier), Arc::clone(&recipes));
                tokio::spawn(async move {
                    let (dual, (scope, req)) = match i % 2 {
                        0 => (true, (recipes.new.0, recipes.dual())),
                        _ => (false, (recipes.old.0, recipes.old_only())),
                    };
                    barrier.wait().await;
                    (dual, store.claim(&scope, &req).await.unwrap().response)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for racer in racers {
            match racer.await.unwrap() {
                (
                    dual,
                    ClaimResponse::Won {
                        claim_id, fence, ..
                    },
                ) => winners.push((dual, claim_id, fence)),
                (_, ClaimResponse::InProgress { .. }) => {}
                (_, other) => panic!("unexpected answer {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "new first: {new_first}: {winners:?}");
        let (dual, claim_id, _) = winners[0];
        let held = |record: Option<(String, i64, Option<uuid::Uuid>)>| {
            record.is_some_and(|(state, _, id)| state == "pending" && id == Some(claim_id))
        };
        assert!(held(recipes.record(db, &recipes.old.0).await));
        match dual {
            true => assert!(held(recipes.record(db, &recipes.new.0).await)),
            false => assert_eq!(
                recipes.record(db, &recipes.new.0).await,
                None,
                "a dual claim that lost gave back what it had won"
            ),
        }
        let (scope, previous_scope) = match dual {
            true => (recipes.new.0, Some(recipes.old.0)),
            false => (recipes.old.0, None),
        };
        store
            .renew(
                &scope,
                &RenewRequest {
                    claim_id,
                    lease_ms: 30_000,
                    previous_scope,
                },
            )
            .await
            .unwrap();
        let mut finalize = finalize_ok(claim_id);
        finalize.previous_scope = previous_scope;
        store.finalize(&scope, finalize.clone()).await.unwrap();
        store.finalize(&scope, finalize).await.unwrap();
        let replayed = ClaimResponse::Completed {
            response: sample_response(),
        };
        assert_eq!(
            store
                .claim(&recipes.new.0, &recipes.dual())
                .await
                .unwrap()
                .response,
            replayed
        );
        assert_eq!(
            store
                .claim(&recipes.old.0, &recipes.old_only())
                .await
                .unwrap()
                .response,
            replayed
        );
    }
}

/// A dual claim that wins its first scope and loses its second (a proxy on the old recipe
/// runs the request) gives the first back before it answers: nothing of it is left to hold
/// the new recipe's key, and it follows the running request to its answer.
#[tokio::test]
async fn a_dual_claim_that_loses_its_second_scope_gives_the_first_back() {
    let db = three();
    let store = db.store().await;
    let recipes = Recipes::on_two_partitions(db, true, "given back");
    let (claim_id, _, _) = must_win(&store, &recipes.old.0, &recipes.old_only()).await;
    assert!(matches!(
        store
            .claim(&recipes.new.0, &recipes.dual())
            .await
            .unwrap()
            .response,
        ClaimResponse::InProgress { .. }
    ));
    assert_eq!(recipes.record(db, &recipes.new.0).await, None);
    store
        .finalize(&recipes.old.0, finalize_ok(claim_id))
        .await
        .unwrap();
    assert_eq!(
        store
            .claim(&recipes.new.0, &recipes.dual())
            .await
            .unwrap()
            .response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
}

/// A dual claim that took its first scope's record over (its cooldown ran out) and lost the
/// second gives that record back as the orphan release does: still `failed` with its
/// fingerprint, so the request it belongs to is not forgotten (`docs/records.md#orphan-claims`).
#[tokio::test]
async fn a_dual_claim_that_took_its_first_record_over_gives_it_back_kept() {
    let db = three();
    let store = db.store().await;
    let recipes = Recipes::on_two_partitions(db, true, "taken over, given back");
    let (failed, _, _) = must_win(&store, &recipes.new.0, &claim_req(recipes.new.1, 30_000)).await;
    release_as_cooldown(&store, &recipes.new.0, failed, 1).await;
    let partition = raw_client(&db.partitions[db.owner(&recipes.new.0)].url()).await;
    wait_for_lease_expiry(&partition, &recipes.new.0).await;
    must_win(&store, &recipes.old.0, &recipes.old_only()).await;
    let before = recipes.record(db, &recipes.new.0).await.unwrap();

    assert!(matches!(
        store
            .claim(&recipes.new.0, &recipes.dual())
            .await
            .unwrap()
            .response,
        ClaimResponse::InProgress { .. }
    ));
    let (state, fence, _) = recipes.record(db, &recipes.new.0).await.unwrap();
    assert_eq!(state, "failed");
    assert!(
        fence > before.1,
        "the dual claim took the record over before giving it back"
    );
}

/// A dual claim's settle lands on neither record when another claim holds one of them (it
/// took the record over after this claim's lease ran out): the two recipes never keep two
/// different answers of one request.
#[tokio::test]
async fn a_dual_settle_lands_nowhere_when_another_claim_took_either_record() {
    let db = three();
    let store = db.store().await;
    let recipes = Recipes::on_two_partitions(db, false, "taken");
    let (claim_id, _, _) = must_win(&store, &recipes.new.0, &recipes.dual()).await;
    let old = raw_client(&db.partitions[db.owner(&recipes.old.0)].url()).await;
    old.execute(
        "UPDATE keyflight_records SET claim_id = gen_random_uuid() WHERE scope = $1",
        &[&recipes.old.0.0.as_slice()],
    )
    .await
    .unwrap();
    let mut finalize = finalize_ok(claim_id);
    finalize.previous_scope = Some(recipes.old.0);
    assert!(matches!(
        store.finalize(&recipes.new.0, finalize).await,
        Err(StoreError::LeaseLost)
    ));
    let (state, _, held_by) = recipes.record(db, &recipes.new.0).await.unwrap();
    assert_eq!((state.as_str(), held_by), ("pending", Some(claim_id)));
}

/// A lease-store started on the router without its partitions (a rollback to a release
/// without partitions, a missing `--partition-url`) fails closed: its migration is refused
/// and every claim fails with the reason, so it never serves an empty table of its own
/// beside the partitions' records.
#[tokio::test]
async fn a_store_without_its_partitions_fails_closed_on_the_router() {
    let db = Partitioned::start(1);
    let scope = fresh_scope();
    let req = claim_req(fingerprint("rolled back"), 30_000);
    must_win(&db.store().await, &scope, &req).await;

    let told = |answer: Result<(), StoreError>| match answer {
        Err(StoreError::Invalid(message)) => {
            assert!(message.contains("--partition-url"), "{message}")
        }
        other => panic!("the router alone answered {other:?}"),
    };
    told(
        keyflight_lease_store::store::migrate(&db.router.url())
            .await
            .map(drop),
    );
    let unpartitioned = Store::connect(&settings(&db.router.url())).await.unwrap();
    told(unpartitioned.readiness().await);
    // A store that does not ask (an older release) fails closed on every statement.
    assert!(matches!(
        unpartitioned.claim(&scope, &req).await,
        Err(StoreError::Unavailable(_))
    ));
    let direct = raw_client(&db.router.url()).await;
    let refused = direct
        .query("SELECT * FROM keyflight_records", &[])
        .await
        .unwrap_err();
    let reason = refused.as_db_error().map(|e| e.message().to_owned());
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("holds no records")),
        "{refused:?}"
    );
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

/// Through one partition's outage every claim it owns fails, and each may have left an
/// orphan claim to release; at most [`MAX_RELEASES_IN_FLIGHT`] releases retry at once, so
/// their retries cannot take the pool from the partitions that still serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn releases_retrying_through_a_partition_outage_are_bounded() {
    let db = Partitioned::start(2);
    let store = db.store().await;
    let req = claim_req(fingerprint("outage"), 30_000);
    db.partitions[1].stop();
    let claims: Vec<_> = (0..MAX_RELEASES_IN_FLIGHT + 100)
        .map(|_| {
            let (store, scope, req) = (store.clone(), scope_on(&db, 1), req.clone());
            tokio::spawn(async move { store.claim(&scope, &req).await })
        })
        .collect();
    for claim in claims {
        assert!(matches!(
            claim.await.unwrap(),
            Err(StoreError::Unavailable(_))
        ));
    }
    assert_eq!(store.orphan_releases_in_flight(), MAX_RELEASES_IN_FLIGHT);
    must_win(&store, &scope_on(&db, 0), &req).await;
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
    assert_eq!(
        store.excess_privileges().await.unwrap(),
        Vec::<String>::new(),
        "the runtime role can do what serving needs and no more, on the router and on \
         every partition"
    );
    // A role that may act as the router's owner could rewrite the routed functions or send
    // a slot anywhere: found on the router, and only there.
    db.router
        .psql("CREATE ROLE owner_member LOGIN; GRANT postgres TO owner_member");
    let on_router = Store::connect(&keyflight_lease_store::store::StoreSettings {
        database_url: as_role(db.router.url(), "owner_member"),
        ..settings.clone()
    })
    .await
    .unwrap()
    .excess_privileges()
    .await
    .unwrap();
    for finding in [
        "router: may act as the owner of the slot map keyflight_partitions (postgres)",
        "router: may act as the owner of keyflight_claim(bytea,bytea,uuid,bigint,bigint,boolean,boolean,text) (postgres)",
    ] {
        assert!(
            on_router.iter().any(|f| f == finding),
            "no `{finding}` in {on_router:?}"
        );
    }
    assert!(
        on_router.iter().all(|f| f.starts_with("router: ")),
        "{on_router:?}"
    );
    let as_owner = db.store().await.excess_privileges().await.unwrap();
    for place in ["router", "partition 0", "partition 1"] {
        assert!(
            as_owner.contains(&format!("{place}: is a superuser")),
            "{as_owner:?}"
        );
    }
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
        .query(
            "SELECT * FROM keyflight_read_record($1)",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap_err();
    assert_eq!(
        denied.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{denied}"
    );
}

/// A store with one batch worker per kind on `db`, so a test can hold that worker on a
/// partition and queue calls behind it.
async fn one_worker_store_on(db: &Partitioned) -> Store {
    let settings = keyflight_lease_store::store::StoreSettings {
        partitions: db.partition_urls(),
        batch: keyflight_lease_store::store::BatchSettings {
            workers: 1,
            max_items: 64,
        },
        ..settings(&db.router.url())
    };
    Store::connect(&settings).await.unwrap()
}

/// A batch worker held on partition `p` by a transaction that locks a record there, until
/// [`PartitionGate::open`].
struct PartitionGate {
    db: tokio_postgres::Client,
    held: tokio::task::JoinHandle<bool>,
}

impl PartitionGate {
    /// Holds the claim worker: a claim of a scope a transaction on `p` is inserting.
    async fn claims(db: &Partitioned, p: usize, store: &Store) -> PartitionGate {
        let scope = scope_on(db, p);
        let gate = begin(db, p).await;
        insert_pending_row(&gate, &scope).await;
        let (store, req) = (store.clone(), claim_req(fingerprint("gate"), 30_000));
        let held = tokio::spawn(async move {
            matches!(
                store.claim(&scope, &req).await.unwrap().response,
                ClaimResponse::Won { .. }
            )
        });
        PartitionGate::held_by(db, p, gate, held).await
    }

    /// Holds the finalize worker: the finalize of a record a transaction on `p` has locked.
    async fn finalizes(db: &Partitioned, p: usize, store: &Store) -> PartitionGate {
        let scope = scope_on(db, p);
        let (claim_id, _, _) =
            must_win(store, &scope, &claim_req(fingerprint("gate"), 30_000)).await;
        let gate = begin(db, p).await;
        gate.execute(
            "SELECT 1 FROM keyflight_records WHERE scope = $1 FOR UPDATE",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();
        let store = store.clone();
        let held =
            tokio::spawn(
                async move { store.finalize(&scope, finalize_ok(claim_id)).await.is_ok() },
            );
        PartitionGate::held_by(db, p, gate, held).await
    }

    /// The gate `db` holds, once `held` waits for its lock on partition `p`.
    async fn held_by(
        db: &Partitioned,
        p: usize,
        gate: tokio_postgres::Client,
        held: tokio::task::JoinHandle<bool>,
    ) -> PartitionGate {
        let watcher = raw_client(&db.partitions[p].url()).await;
        eventually(
            "the worker waits for the gate",
            Duration::from_secs(20),
            || async {
                watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get::<_, i64>(0)
                    >= 1
            },
        )
        .await;
        PartitionGate { db: gate, held }
    }

    /// Rolls the gate back: the held call goes through, and the worker moves on.
    async fn open(self) {
        self.db.batch_execute("ROLLBACK").await.unwrap();
        assert!(self.held.await.unwrap(), "the held call went through");
    }
}

/// A session on partition `p` with a transaction open.
async fn begin(db: &Partitioned, p: usize) -> tokio_postgres::Client {
    let client = raw_client(&db.partitions[p].url()).await;
    client.batch_execute("BEGIN").await.unwrap();
    client
}

/// Finalizes every `(scope, claim_id)` of `won` at once, each in its own task.
fn spawn_finalizes(
    store: &Store,
    won: &[(Digest, uuid::Uuid)],
) -> Vec<tokio::task::JoinHandle<Result<(), StoreError>>> {
    won.iter()
        .map(|(scope, claim_id)| {
            let (store, scope, claim_id) = (store.clone(), *scope, *claim_id);
            tokio::spawn(async move { store.finalize(&scope, finalize_ok(claim_id)).await })
        })
        .collect()
}

/// How many transactions last wrote the records of `scopes`, on each partition (the rows
/// one transaction wrote share its id, `xmin`).
async fn transactions_per_partition(db: &Partitioned, scopes: &[Digest]) -> Vec<i64> {
    let scopes: Vec<&[u8]> = scopes.iter().map(|s| s.0.as_slice()).collect();
    let mut counts = Vec::new();
    for partition in &db.partitions {
        let client = raw_client(&partition.url()).await;
        let row = client
            .query_one(
                "SELECT count(DISTINCT xmin::text) FROM keyflight_records WHERE scope = ANY($1)",
                &[&scopes],
            )
            .await
            .unwrap();
        counts.push(row.get(0));
    }
    counts
}

/// Ten fresh scopes on each of `db`'s partitions, interleaved.
fn scopes_on_every_partition(db: &Partitioned) -> Vec<Digest> {
    (0..10)
        .flat_map(|_| (0..db.partitions.len()).map(|p| scope_on(db, p)))
        .collect()
}

/// Group commit survives partitioning: claims queued together run as one routed batch,
/// which PL/Proxy splits by partition (each partition inserts its share in one statement),
/// and every call gets the answer one database would give; the same for finalizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_finalizes_queued_together_run_as_one_batch_split_by_partition() {
    let db = Partitioned::start(2);
    let store = one_worker_store_on(&db).await;
    let scopes = scopes_on_every_partition(&db);
    let req = claim_req(fingerprint("batched"), 30_000);

    let gate = PartitionGate::claims(&db, 0, &store).await;
    let claims: Vec<_> = scopes
        .iter()
        .map(|scope| {
            let (store, scope, req) = (store.clone(), *scope, req.clone());
            tokio::spawn(async move { store.claim(&scope, &req).await.unwrap().response })
        })
        .collect();
    wait_for_queued(&store, BatchKind::Claim, scopes.len()).await;
    gate.open().await;
    let mut won = Vec::new();
    let mut fences = std::collections::HashSet::new();
    for (scope, claim) in scopes.iter().zip(claims) {
        let ClaimResponse::Won {
            claim_id,
            fence,
            how: WonHow::Claimed,
            ..
        } = claim.await.unwrap()
        else {
            panic!("a fresh scope in a batch must be won");
        };
        assert!(fences.insert(fence), "fence {fence} handed out twice");
        let owner = raw_client(&db.partitions[db.owner(scope)].url()).await;
        assert_eq!(
            row_state(&owner, scope).await,
            Some(("pending".into(), fence, Some(claim_id))),
            "the record is on its owner, held by the answered claim"
        );
        won.push((*scope, claim_id));
    }
    let claims = store.batch_sizes().totals(BatchKind::Claim);
    assert_eq!((claims.batches, claims.largest), (2, 20), "{claims:?}");
    assert_eq!(
        transactions_per_partition(&db, &scopes).await,
        vec![1, 1],
        "each partition inserted its share in one transaction"
    );

    let gate = PartitionGate::finalizes(&db, 1, &store).await;
    let finalizes = spawn_finalizes(&store, &won);
    wait_for_queued(&store, BatchKind::Finalize, won.len()).await;
    gate.open().await;
    for finalize in finalizes {
        finalize.await.unwrap().unwrap();
    }
    let finalizes = store.batch_sizes().totals(BatchKind::Finalize);
    assert_eq!(
        (finalizes.batches, finalizes.largest),
        (2, 20),
        "{finalizes:?}"
    );
    for (scope, _) in &won {
        assert_eq!(
            store.claim(scope, &req).await.unwrap().response,
            ClaimResponse::Completed {
                response: sample_response()
            }
        );
    }
}

/// A batch over a partition that is down fails only the calls whose scopes that partition
/// owns: the others land, and nothing the batch may have won on the live partition is
/// left behind as an orphan that would hold its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_a_partition_that_is_down_fails_only_its_calls() {
    let db = Partitioned::start(2);
    let store = one_worker_store_on(&db).await;
    let req = claim_req(fingerprint("outage"), 30_000);
    let settling = scopes_on_every_partition(&db);
    let mut won = Vec::new();
    for scope in &settling {
        won.push((*scope, must_win(&store, scope, &req).await.0));
    }
    db.partitions[1].stop();

    let gate = PartitionGate::finalizes(&db, 0, &store).await;
    let finalizes = spawn_finalizes(&store, &won);
    wait_for_queued(&store, BatchKind::Finalize, won.len()).await;
    gate.open().await;
    for ((scope, _), finalize) in won.iter().zip(finalizes) {
        match (db.owner(scope), finalize.await.unwrap()) {
            (0, Ok(())) | (1, Err(StoreError::Unavailable(_))) => {}
            (p, other) => panic!("a finalize on partition {p} answered {other:?}"),
        }
    }

    let claiming = scopes_on_every_partition(&db);
    let gate = PartitionGate::claims(&db, 0, &store).await;
    let claims: Vec<_> = claiming
        .iter()
        .map(|scope| {
            let (store, scope, req) = (store.clone(), *scope, req.clone());
            tokio::spawn(async move { store.claim(&scope, &req).await })
        })
        .collect();
    wait_for_queued(&store, BatchKind::Claim, claiming.len()).await;
    gate.open().await;
    let live = raw_client(&db.partitions[0].url()).await;
    for (scope, claim) in claiming.iter().zip(claims) {
        match (db.owner(scope), claim.await.unwrap()) {
            (
                0,
                Ok(ClaimAttempt {
                    response:
                        ClaimResponse::Won {
                            claim_id,
                            how: WonHow::Claimed,
                            fence,
                            ..
                        },
                    ..
                }),
            ) => assert_eq!(
                row_state(&live, scope).await,
                Some(("pending".into(), fence, Some(claim_id)))
            ),
            (1, Err(StoreError::Unavailable(_))) => {}
            (p, other) => panic!("a claim on partition {p} answered {other:?}"),
        }
    }
}
