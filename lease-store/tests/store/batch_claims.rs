//! Group commit of claims against a real Postgres: claims queued together run
//! as one statement, and every claim gets the answer the single path gives.
//!
//! How a test makes calls queue, without sleeping: the store has ONE claim
//! worker; a gate transaction holds an uncommitted row on a scope, and a claim
//! of that scope occupies the worker (its statement waits on the row, which
//! the test sees in `pg_stat_activity`). Claims made then wait in the queue
//! (the test sees `batch_queued`); when the gate rolls back, the worker takes
//! them all as one batch.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;

use crate::support::*;
use keyflight_lease_store::metrics::{BatchQueued, Metrics, PoolStatus};
use keyflight_lease_store::store::{BatchKind, BatchTotals, Store, StoreError};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, ReleaseAs, ReleaseRequest, WonHow};
use keyflight_testkit::pg::wait_for_lock_waits;
use tokio::task::JoinHandle;

/// A worker held in the database by an uncommitted row, until [`Gate::open`].
struct Gate {
    db: tokio_postgres::Client,
    held: JoinHandle<ClaimResponse>,
}

impl Gate {
    /// Occupies `store`'s claim worker: a claim of a scope a transaction is inserting.
    async fn hold(store: &Store, app: &str) -> Gate {
        let db = raw_client(&cluster().url()).await;
        let scope = fresh_scope();
        db.batch_execute("BEGIN").await.unwrap();
        insert_pending_row(&db, &scope).await;
        let held = spawn_claim(store, scope, claim_req(fingerprint("gate"), 30_000));
        let watcher = raw_client(&cluster().url()).await;
        wait_for_lock_waits(&watcher, app, 1).await;
        Gate { db, held }
    }

    /// Rolls the row back: the held claim wins its scope, and the worker moves on.
    async fn open(self) {
        self.db.batch_execute("ROLLBACK").await.unwrap();
        assert!(matches!(
            self.held.await.unwrap(),
            ClaimResponse::Won { .. }
        ));
    }
}

fn spawn_claim(store: &Store, scope: Digest, req: ClaimRequest) -> JoinHandle<ClaimResponse> {
    let store = store.clone();
    tokio::spawn(async move { store.claim(&scope, &req).await.unwrap().response })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_queued_together_run_as_one_batch_and_each_wins_its_fresh_scope() {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    let gate = Gate::hold(&store, &app).await;
    let scopes: Vec<Digest> = (0..20).map(|_| fresh_scope()).collect();
    let req = claim_req(fingerprint("batched"), 30_000);
    let claims: Vec<_> = scopes
        .iter()
        .map(|scope| spawn_claim(&store, *scope, req.clone()))
        .collect();
    wait_for_queued(&store, BatchKind::Claim, 20).await;
    gate.open().await;

    let mut fences = HashSet::new();
    for (scope, claim) in scopes.iter().zip(claims) {
        let ClaimResponse::Won {
            claim_id,
            fence,
            how,
            lease_ms,
        } = claim.await.unwrap()
        else {
            panic!("a fresh scope in a batch must be won");
        };
        assert_eq!((how, lease_ms), (WonHow::Claimed, 30_000));
        assert!(fences.insert(fence), "fence {fence} handed out twice");
        assert_eq!(
            row_state(&db, scope).await.unwrap(),
            ("pending".into(), fence, Some(claim_id))
        );
    }
    // The gate's claim ran alone; the twenty queued behind it ran as one batch.
    assert_eq!(
        store.batch_sizes().totals(BatchKind::Claim),
        BatchTotals {
            batches: 2,
            calls: 21,
            largest: 20
        }
    );
    let text = Metrics::new(
        store.batch_sizes(),
        store.orphans_released_counter(),
        store.lapses_held_counter(),
    )
    .render(
        PoolStatus {
            size: 0,
            available: 0,
            waiting: 0,
            settings_missing: false,
        },
        0,
        BatchQueued::default(),
    );
    for line in [
        "keyflight_store_batch_size_count{kind=\"claim\"} 2",
        "keyflight_store_batch_size_sum{kind=\"claim\"} 21.0",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_one_scope_queued_together_still_have_exactly_one_winner() {
    let (store, app) = one_worker_store().await;
    let gate = Gate::hold(&store, &app).await;
    let contested = fresh_scope();
    // Twelve claims of one scope (eight of one request, four of another), among fresh ones.
    let labels: Vec<&str> = (0..12)
        .map(|i| if i % 3 == 0 { "b" } else { "a" })
        .collect();
    let contenders: Vec<_> = labels
        .iter()
        .map(|label| spawn_claim(&store, contested, claim_req(fingerprint(label), 30_000)))
        .collect();
    let fresh: Vec<_> = (0..6)
        .map(|_| spawn_claim(&store, fresh_scope(), claim_req(fingerprint("a"), 30_000)))
        .collect();
    wait_for_queued(&store, BatchKind::Claim, 18).await;
    gate.open().await;

    let mut answers = Vec::new();
    for (label, claim) in labels.iter().zip(contenders) {
        answers.push((*label, claim.await.unwrap()));
    }
    let winners: Vec<&str> = answers
        .iter()
        .filter(|(_, answer)| matches!(answer, ClaimResponse::Won { .. }))
        .map(|(label, _)| *label)
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    for (label, answer) in &answers {
        match answer {
            ClaimResponse::Won { how, .. } => assert_eq!(*how, WonHow::Claimed),
            ClaimResponse::InProgress { .. } => assert_eq!(*label, winners[0], "{answers:?}"),
            ClaimResponse::Conflict => assert_ne!(*label, winners[0], "{answers:?}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    for claim in fresh {
        assert!(matches!(claim.await.unwrap(), ClaimResponse::Won { .. }));
    }
    // The contested scope took one place in the batch; the other eleven ran singly.
    let totals = store.batch_sizes().totals(BatchKind::Claim);
    assert_eq!((totals.batches, totals.largest), (2, 7), "{totals:?}");
}

/// Records in every state a claim can meet, and what the single path answers there.
async fn records_in_every_state(store: &Store) -> Vec<(Digest, ClaimRequest, ClaimResponse)> {
    let db = raw_client(&cluster().url()).await;
    let same = claim_req(fingerprint("same"), 30_000);
    let other = claim_req(fingerprint("other"), 30_000);
    let mut cases = Vec::new();

    let completed = fresh_scope();
    let (claim_id, _, _) = must_win(store, &completed, &same).await;
    store
        .finalize(&completed, finalize_ok(claim_id))
        .await
        .unwrap();
    let replay = ClaimResponse::Completed {
        response: sample_response(),
    };
    cases.push((completed, same.clone(), replay));
    cases.push((completed, other.clone(), ClaimResponse::Conflict));

    let unreplayable = fresh_scope();
    let (claim_id, _, _) = must_win(store, &unreplayable, &same).await;
    let mut request = finalize_ok(claim_id);
    request.replayable = false;
    store.finalize(&unreplayable, request).await.unwrap();
    cases.push((unreplayable, same.clone(), ClaimResponse::NotReplayable));

    let running = fresh_scope();
    must_win(store, &running, &same).await;
    cases.push((
        running,
        same.clone(),
        ClaimResponse::InProgress { retry_after_s: 30 },
    ));

    for (release_as, answer) in [
        (
            ReleaseAs::Cooldown,
            ClaimResponse::Cooldown { retry_after_s: 60 },
        ),
        (ReleaseAs::Unknown, ClaimResponse::Unknown { fence: None }),
    ] {
        let scope = fresh_scope();
        let (claim_id, fence, _) = must_win(store, &scope, &same).await;
        let release = ReleaseRequest {
            claim_id,
            release_as,
            cooldown_ms: Some(60_000),
            previous_scope: None,
        };
        store.release(&scope, &release).await.unwrap();
        let answer = match answer {
            ClaimResponse::Unknown { .. } => ClaimResponse::Unknown { fence: Some(fence) },
            other => other,
        };
        cases.push((scope, same.clone(), answer));
    }

    let abandoned = fresh_scope();
    must_win(store, &abandoned, &claim_req(fingerprint("same"), 200)).await;
    wait_for_lease_expiry(&db, &abandoned).await;
    cases.push((abandoned, same.clone(), won(WonHow::RecoveredAbandoned)));

    let retired = fresh_scope();
    let (claim_id, _, _) = must_win(store, &retired, &other).await;
    store
        .finalize(&retired, finalize_ok(claim_id))
        .await
        .unwrap();
    age_past_retention(&db, &retired).await;
    cases.push((retired, same.clone(), won(WonHow::RecoveredTtl)));

    for _ in 0..4 {
        cases.push((fresh_scope(), same.clone(), won(WonHow::Claimed)));
    }
    cases
}

/// A `won` answer, compared by how only ([`same_answer`]).
fn won(how: WonHow) -> ClaimResponse {
    ClaimResponse::Won {
        claim_id: uuid::Uuid::nil(),
        fence: 0,
        how,
        lease_ms: 30_000,
    }
}

/// Equal answers; a win by how it won, a wait by roughly how long.
fn same_answer(got: &ClaimResponse, expected: &ClaimResponse) -> bool {
    match (got, expected) {
        (ClaimResponse::Won { how: a, .. }, ClaimResponse::Won { how: b, .. }) => a == b,
        (
            ClaimResponse::InProgress { retry_after_s: a },
            ClaimResponse::InProgress { retry_after_s: b },
        )
        | (
            ClaimResponse::Cooldown { retry_after_s: a },
            ClaimResponse::Cooldown { retry_after_s: b },
        ) => a <= b && *a + 5 >= *b,
        _ => got == expected,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_fresh_and_existing_scopes_answers_each_claim_as_the_single_path_does() {
    let (store, app) = one_worker_store().await;
    let cases = records_in_every_state(&store).await;
    let before = store.batch_sizes().totals(BatchKind::Claim);
    let gate = Gate::hold(&store, &app).await;
    // Two of the cases share a scope (the completed record, asked with two fingerprints).
    let claims: Vec<_> = cases
        .iter()
        .map(|(scope, req, _)| spawn_claim(&store, *scope, req.clone()))
        .collect();
    wait_for_queued(&store, BatchKind::Claim, cases.len()).await;
    gate.open().await;

    for ((_, req, expected), claim) in cases.iter().zip(claims) {
        let got = claim.await.unwrap();
        assert!(
            same_answer(&got, expected),
            "{:?}: got {got:?}, expected {expected:?}",
            req.fingerprint
        );
    }
    let after = store.batch_sizes().totals(BatchKind::Claim);
    assert_eq!(after.batches - before.batches, 2, "{after:?}");
    assert_eq!(after.largest, cases.len() as u64 - 1, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_deadlocks_runs_its_claims_singly_instead_of_failing_them() {
    let (store, app) = one_worker_store().await;
    let watcher = raw_client(&cluster().url()).await;
    let deadlocks_before = deadlocks(&watcher).await;
    let (first, second) = {
        let (a, b) = (fresh_scope(), fresh_scope());
        (a.min(b), a.max(b))
    };
    // Another transaction inserts the batch's second scope and, once the batch holds the
    // first and waits for the second, the first: a lock cycle. It waits long before
    // looking for deadlocks, so the batch (Postgres' default, 1 s) is the one cancelled.
    let other = Arc::new(raw_client(&cluster().url()).await);
    other
        .batch_execute("SET deadlock_timeout = '30s'; BEGIN")
        .await
        .unwrap();
    insert_pending_row(&other, &second).await;

    let gate = Gate::hold(&store, &app).await;
    let req = claim_req(fingerprint("deadlock"), 30_000);
    let claims = [
        spawn_claim(&store, first, req.clone()),
        spawn_claim(&store, second, req.clone()),
    ];
    wait_for_queued(&store, BatchKind::Claim, 2).await;
    gate.open().await;
    wait_for_lock_waits(&watcher, &app, 1).await;
    let cycle = {
        let other = Arc::clone(&other);
        tokio::spawn(async move { insert_pending_row_unless_present(&other, &first).await })
    };
    // The batch is cancelled. Its first claim, now single, races the other transaction's
    // insert for the first row (either may get it: the other's insert then does nothing);
    // the second claim waits for the other transaction. It rolls back, and each claim wins
    // its fresh scope.
    cycle.await.unwrap().unwrap();
    other.batch_execute("ROLLBACK").await.unwrap();
    for claim in claims {
        match claim.await.unwrap() {
            ClaimResponse::Won { how, .. } => assert_eq!(how, WonHow::Claimed),
            other => panic!("a claim of a batch that deadlocked answered {other:?}"),
        }
    }
    keyflight_testkit::process::eventually(
        "Postgres counted the deadlock",
        std::time::Duration::from_secs(10),
        || async { deadlocks(&watcher).await > deadlocks_before },
    )
    .await;
    assert_eq!(
        store.batch_sizes().totals(BatchKind::Claim).largest,
        2,
        "the two claims were one batch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_times_out_runs_its_claims_singly_and_only_the_blocked_one_fails() {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    // One transaction inserts the gate's scope and one of the batch's, and keeps both
    // past `statement_timeout` (2 s): first the gate's claim, then the batch, wait on it.
    let (gate_scope, blocked) = (fresh_scope(), fresh_scope());
    db.batch_execute("BEGIN").await.unwrap();
    insert_pending_row(&db, &gate_scope).await;
    insert_pending_row(&db, &blocked).await;
    let store_for_gate = store.clone();
    let req = claim_req(fingerprint("timeout"), 30_000);
    let gate = {
        let req = req.clone();
        tokio::spawn(async move { store_for_gate.claim(&gate_scope, &req).await })
    };
    // (Watched from another session: a transaction sees one snapshot of pg_stat_activity.)
    let watcher = raw_client(&cluster().url()).await;
    wait_for_lock_waits(&watcher, &app, 1).await;
    let scopes: Vec<Digest> = (0..5).map(|_| fresh_scope()).chain([blocked]).collect();
    let claims: Vec<_> = scopes
        .iter()
        .map(|scope| {
            let (store, scope, req) = (store.clone(), *scope, req.clone());
            tokio::spawn(async move { store.claim(&scope, &req).await })
        })
        .collect();
    wait_for_queued(&store, BatchKind::Claim, scopes.len()).await;

    let cancelled = |answer: Result<_, StoreError>| match answer {
        Err(StoreError::Unavailable(message)) => assert!(message.starts_with("57014"), "{message}"),
        other => panic!("a claim whose statement timed out answered {other:?}"),
    };
    cancelled(gate.await.unwrap());
    // The batch timed out as a whole, and is nobody's answer: each claim ran alone, so the
    // five free scopes were won, and only the claim of the locked one timed out again.
    let mut answers = claims.into_iter();
    for (scope, claim) in scopes[..5].iter().zip(answers.by_ref()) {
        let attempt = claim.await.unwrap().unwrap();
        let ClaimResponse::Won {
            claim_id, fence, ..
        } = attempt.response
        else {
            panic!("a free scope was not won alone: {attempt:?}");
        };
        assert_eq!(
            row_state(&db, scope).await,
            Some(("pending".into(), fence, Some(claim_id)))
        );
    }
    for claim in answers {
        cancelled(claim.await.unwrap());
    }
    db.batch_execute("ROLLBACK").await.unwrap();
    must_win(&store, &blocked, &req).await;
    assert_eq!(
        store.batch_sizes().totals(BatchKind::Claim).largest,
        6,
        "the six claims were one batch"
    );
}
