//! At-most-once claims (`docs/records.md#a-lapsed-at-most-once-lease`): a lapsed lease of
//! a claim made under a hold policy becomes `unknown` for an operator, on the single
//! path, after a group-commit batch and for a dual claim alike; a lapsed lease of any
//! other claim is taken over as before, and a renewed one is never held.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::store::{BatchKind, Store, StoreError, StoreSettings};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, PreviousIdentity, RecordState, RenewRequest, ResolveAs,
    ResolveRequest, WonHow,
};
use keyflight_testkit::pg::wait_for_lock_waits;
use keyflight_testkit::process::eventually;
use tokio::task::JoinHandle;

/// An at-most-once claim (a hold policy's) with a short lease.
fn held_req(label: &str) -> ClaimRequest {
    ClaimRequest {
        at_most_once: true,
        ..claim_req(fingerprint(label), 300)
    }
}

#[tokio::test]
async fn a_lapsed_at_most_once_lease_becomes_unknown_instead_of_being_taken_over() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = held_req("dead winner, hold");
    let (claim_id, fence, _) = must_win(&store, &scope, &req).await;
    wait_for_lease_expiry(&db, &scope).await;

    let held_before = store.lapses_held();
    assert_eq!(
        fenceless(store.claim(&scope, &req).await.unwrap().response),
        ClaimResponse::Unknown { fence: None }
    );
    assert_eq!(store.lapses_held(), held_before + 1);
    assert_eq!(
        row_state(&db, &scope).await.unwrap(),
        ("unknown".into(), fence, Some(claim_id)),
        "nobody won: the dead winner's claim and fence stay on the record"
    );
    assert_eq!(
        fenceless(store.claim(&scope, &req).await.unwrap().response),
        ClaimResponse::Unknown { fence: None },
        "every later retry is held too"
    );
    assert_eq!(store.lapses_held(), held_before + 1, "held once");
    assert_eq!(
        store
            .claim(&scope, &held_req("another body"))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );
    let listed = store.list(Some(RecordState::Unknown), 1000).await.unwrap();
    assert!(listed.records.iter().any(|r| r.scope == scope));
    // The winner was not dead after all: its late record is refused, the operator decides.
    assert!(matches!(
        store.finalize(&scope, finalize_ok(claim_id)).await,
        Err(StoreError::LeaseLost)
    ));
    let resolve = ResolveRequest {
        resolve_as: ResolveAs::Completed,
        response: Some(sample_response()),
        reason: "the payment went through".into(),
    };
    store.resolve(&scope, &resolve, "operator").await.unwrap();
    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
}

#[tokio::test]
async fn a_lapsed_lease_of_a_retry_policy_is_taken_over_as_before() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("dead winner, retry"), 300);
    let (_, fence, _) = must_win(&store, &scope, &req).await;
    wait_for_lease_expiry(&db, &scope).await;
    let held_before = store.lapses_held();

    let (_, new_fence, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
    assert!(new_fence > fence);
    assert_eq!(store.lapses_held(), held_before);
}

#[tokio::test]
async fn a_renewed_at_most_once_lease_is_in_progress_not_held() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = held_req("live winner, hold");
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    let renew = RenewRequest {
        claim_id,
        lease_ms: 30_000,
        previous_scope: None,
    };
    store.renew(&scope, &renew).await.unwrap();
    assert!(matches!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::InProgress { .. }
    ));
    assert_eq!(row_state(&db, &scope).await.unwrap().0, "pending");
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
}

/// A claim without the flag — made under a policy that was `retry` then, or through a
/// proxy on a release that predates the flag — whose lease lapsed is held when a hold
/// policy's retry of the same operation finds it: that retry's policy speaks for the
/// operation now, and the outcome is just as uncertain. Another body holds nothing.
#[tokio::test]
async fn a_lapsed_lease_is_held_when_the_retry_that_finds_it_is_at_most_once() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let label = "claimed before the flag, retried under hold";
    let (claim_id, fence, _) = must_win(&store, &scope, &claim_req(fingerprint(label), 300)).await;
    wait_for_lease_expiry(&db, &scope).await;
    let held_before = store.lapses_held();

    assert_eq!(
        store
            .claim(&scope, &held_req("another body"))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );
    assert_eq!(row_state(&db, &scope).await.unwrap().0, "pending");
    assert_eq!(
        fenceless(
            store
                .claim(&scope, &held_req(label))
                .await
                .unwrap()
                .response
        ),
        ClaimResponse::Unknown { fence: None }
    );
    assert_eq!(store.lapses_held(), held_before + 1);
    assert_eq!(
        row_state(&db, &scope).await.unwrap(),
        ("unknown".into(), fence, Some(claim_id)),
        "nobody won: the lapsed claim and its fence stay on the record"
    );
}

#[tokio::test]
async fn a_record_reopened_past_its_retention_carries_the_new_claims_setting() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let label = "policy changed to hold";
    must_win(&store, &scope, &claim_req(fingerprint(label), 300)).await;
    wait_for_lease_expiry(&db, &scope).await;
    age_past_retention(&db, &scope).await;
    let (_, _, how) = must_win(&store, &scope, &held_req(label)).await;
    assert_eq!(how, WonHow::RecoveredTtl);
    wait_for_lease_expiry(&db, &scope).await;
    assert_eq!(
        fenceless(
            store
                .claim(&scope, &claim_req(fingerprint(label), 300))
                .await
                .unwrap()
                .response
        ),
        ClaimResponse::Unknown { fence: None },
        "the reopened record is at-most-once whatever the next claim says"
    );
}

#[tokio::test]
async fn during_the_takeover_grace_a_lapsed_at_most_once_lease_is_in_progress_then_unknown() {
    let grace = Duration::from_millis(1500);
    let scope = fresh_scope();
    let req = held_req("grace, hold");
    let db = raw_client(&cluster().url()).await;
    must_win(&store().await, &scope, &req).await;
    wait_for_lease_expiry(&db, &scope).await;
    let restarted = Store::connect(&StoreSettings {
        takeover_grace: grace,
        ..settings(&cluster().url())
    })
    .await
    .unwrap();
    let started = Instant::now();
    let attempt = restarted.claim(&scope, &req).await.unwrap();
    assert!(
        matches!(attempt.response, ClaimResponse::InProgress { .. }),
        "the winner may be alive with its record in its outbox: {attempt:?}"
    );
    assert_eq!(row_state(&db, &scope).await.unwrap().0, "pending");
    assert!(
        attempt.pending_until.is_some(),
        "a waiter wakes when the grace ends"
    );
    eventually(
        "the grace ended and the lapse is held",
        Duration::from_secs(10),
        || async {
            match restarted.claim(&scope, &req).await.unwrap().response {
                ClaimResponse::Unknown { .. } => true,
                ClaimResponse::InProgress { .. } => false,
                other => panic!("a lapsed at-most-once lease must not be {other:?}"),
            }
        },
    )
    .await;
    assert!(started.elapsed() >= grace - Duration::from_millis(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_won_in_a_group_commit_batch_is_held_when_it_lapses() {
    let (store, app) = one_worker_store().await;
    let db = raw_client(&cluster().url()).await;
    // Occupy the one claim worker on a row an open transaction is inserting.
    let gate_scope = fresh_scope();
    db.batch_execute("BEGIN").await.unwrap();
    insert_pending_row(&db, &gate_scope).await;
    let gate = spawn_claim(&store, gate_scope, claim_req(fingerprint("gate"), 30_000));
    let watcher = raw_client(&cluster().url()).await;
    wait_for_lock_waits(&watcher, &app, 1).await;

    let scopes = [fresh_scope(), fresh_scope(), fresh_scope()];
    let queued: Vec<_> = scopes
        .iter()
        .map(|scope| spawn_claim(&store, *scope, held_req("batched, hold")))
        .collect();
    wait_for_queued(&store, BatchKind::Claim, scopes.len()).await;
    db.batch_execute("ROLLBACK").await.unwrap();
    assert!(matches!(gate.await.unwrap(), ClaimResponse::Won { .. }));
    for claim in queued {
        assert!(matches!(
            claim.await.unwrap(),
            ClaimResponse::Won {
                how: WonHow::Claimed,
                ..
            }
        ));
    }
    assert!(
        store.batch_sizes().totals(BatchKind::Claim).largest >= scopes.len() as u64,
        "the claims ran as one batch"
    );
    for scope in &scopes {
        wait_for_lease_expiry(&watcher, scope).await;
        assert_eq!(
            fenceless(
                store
                    .claim(scope, &held_req("batched, hold"))
                    .await
                    .unwrap()
                    .response
            ),
            ClaimResponse::Unknown { fence: None }
        );
        assert_eq!(row_state(&watcher, scope).await.unwrap().0, "unknown");
    }
}

#[tokio::test]
async fn a_lapsed_at_most_once_dual_claim_holds_both_records() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let (new_scope, old_scope) = (fresh_scope(), fresh_scope());
    let req = ClaimRequest {
        previous: Some(PreviousIdentity {
            scope: old_scope,
            fingerprint: fingerprint("old recipe, hold"),
        }),
        ..held_req("new recipe, hold")
    };
    must_win(&store, &new_scope, &req).await;
    wait_for_lease_expiry(&db, &new_scope).await;
    let held_before = store.lapses_held();

    assert_eq!(
        fenceless(store.claim(&new_scope, &req).await.unwrap().response),
        ClaimResponse::Unknown { fence: None }
    );
    assert_eq!(store.lapses_held(), held_before + 2);
    for scope in [new_scope, old_scope] {
        assert_eq!(row_state(&db, &scope).await.unwrap().0, "unknown");
    }
}

#[tokio::test]
async fn a_lapsed_dual_claim_without_the_flag_is_held_by_a_hold_policys_retry() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let (new_scope, old_scope) = (fresh_scope(), fresh_scope());
    let previous = Some(PreviousIdentity {
        scope: old_scope,
        fingerprint: fingerprint("old recipe, unmarked"),
    });
    let unmarked = ClaimRequest {
        previous,
        ..claim_req(fingerprint("new recipe, unmarked"), 300)
    };
    must_win(&store, &new_scope, &unmarked).await;
    // Both leases, each from its own `clock_timestamp()`: the old scope's may run out a
    // moment after the new one's, and a retry between the two would find it still live.
    for scope in [new_scope, old_scope] {
        wait_for_lease_expiry(&db, &scope).await;
    }
    let held_before = store.lapses_held();

    let retry = ClaimRequest {
        at_most_once: true,
        ..unmarked
    };
    assert_eq!(
        fenceless(store.claim(&new_scope, &retry).await.unwrap().response),
        ClaimResponse::Unknown { fence: None }
    );
    assert_eq!(store.lapses_held(), held_before + 2);
    for scope in [new_scope, old_scope] {
        assert_eq!(row_state(&db, &scope).await.unwrap().0, "unknown");
    }
}

fn spawn_claim(store: &Store, scope: Digest, req: ClaimRequest) -> JoinHandle<ClaimResponse> {
    let store = store.clone();
    tokio::spawn(async move { store.claim(&scope, &req).await.unwrap().response })
}
