//! L1–L3 against a real Postgres: the one-statement claim, fencing, and every
//! state a claim can meet.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::*;
use keyflight_lease_store::store::StoreError;
use keyflight_protocol::wire::{
    ClaimResponse, FinalizeRequest, ReleaseAs, ReleaseRequest, RenewRequest, StoredResponse, WonHow,
};
use tokio::sync::Barrier;

#[tokio::test]
async fn sixty_four_concurrent_claims_on_a_fresh_scope_have_exactly_one_winner() {
    let store = store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("concurrent"), 30_000);
    let barrier = Arc::new(Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (store, req, barrier) = (store.clone(), req.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(&scope, &req).await.unwrap().response
            })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            ClaimResponse::Won { how, .. } => {
                assert_eq!(how, WonHow::Claimed);
                won += 1;
            }
            ClaimResponse::InProgress { retry_after_s } => assert!(retry_after_s >= 1),
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test]
async fn expired_lease_with_same_fingerprint_is_recovered_with_a_higher_fence_and_fences_out_the_old_claim()
 {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("crashed winner"), 200);
    let (old_claim, old_fence, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::Claimed);

    wait_for_lease_expiry(&db, &scope).await;
    let (new_claim, new_fence, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
    assert!(new_fence > old_fence, "{new_fence} must exceed {old_fence}");
    assert_ne!(new_claim, old_claim);

    let renew = RenewRequest {
        claim_id: old_claim,
        lease_ms: 10_000,
        previous_scope: None,
    };
    assert!(matches!(
        store.renew(&scope, &renew).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.finalize(&scope, finalize_ok(old_claim)).await,
        Err(StoreError::LeaseLost)
    ));
    assert_eq!(
        row_state(&db, &scope).await.unwrap(),
        ("pending".into(), new_fence, Some(new_claim))
    );
    store
        .finalize(&scope, finalize_ok(new_claim))
        .await
        .unwrap();
}

#[tokio::test]
async fn expired_lease_with_a_different_fingerprint_is_a_conflict_and_the_row_is_unchanged() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let (claim_id, fence, _) = must_win(&store, &scope, &claim_req(fingerprint("a"), 200)).await;
    wait_for_lease_expiry(&db, &scope).await;

    let answer = store
        .claim(&scope, &claim_req(fingerprint("b"), 200))
        .await
        .unwrap();
    assert_eq!(answer.response, ClaimResponse::Conflict);
    assert_eq!(
        row_state(&db, &scope).await.unwrap(),
        ("pending".into(), fence, Some(claim_id))
    );
}

#[tokio::test]
async fn a_record_past_retention_is_reclaimed_even_with_a_different_fingerprint() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let first = claim_req(fingerprint("old request"), 10_000);
    let (claim_id, old_fence, _) = must_win(&store, &scope, &first).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    age_past_retention(&db, &scope).await;

    let (_, fence, how) = must_win(&store, &scope, &claim_req(fingerprint("new"), 10_000)).await;
    assert_eq!(how, WonHow::RecoveredTtl);
    assert!(fence > old_fence);
}

#[tokio::test]
async fn a_zero_retention_is_rejected_because_it_would_replay_nothing() {
    let store = store().await;
    let scope = fresh_scope();
    let mut req = claim_req(fingerprint("no retention"), 10_000);
    req.retention_s = Some(0);
    match store.claim(&scope, &req).await {
        Err(StoreError::Invalid(reason)) => assert!(reason.contains("retention_s"), "{reason}"),
        other => panic!("a zero retention must be invalid, got {other:?}"),
    }
    req.retention_s = Some(10);
    must_win(&store, &scope, &req).await;
}

/// A record that completes after its retention would be reclaimable the moment it is
/// recorded: a retry would run the operation again instead of replaying it.
#[tokio::test]
async fn a_retention_shorter_than_the_lease_is_rejected() {
    let store = store().await;
    let scope = fresh_scope();
    let mut req = claim_req(fingerprint("short retention"), 10_000);
    req.retention_s = Some(9);
    match store.claim(&scope, &req).await {
        Err(StoreError::Invalid(reason)) => {
            assert!(
                reason.contains("retention_s") && reason.contains("lease_ms"),
                "{reason}"
            )
        }
        other => panic!("a retention shorter than the lease must be invalid, got {other:?}"),
    }
    req.retention_s = Some(10);
    must_win(&store, &scope, &req).await;
}

#[tokio::test]
async fn a_live_pending_record_past_retention_is_not_reclaimed() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let first = claim_req(fingerprint("long running"), 30_000);
    must_win(&store, &scope, &first).await;
    age_past_retention(&db, &scope).await;

    let same = store.claim(&scope, &first).await.unwrap();
    assert!(matches!(same.response, ClaimResponse::InProgress { .. }));
    assert!(same.pending_until.is_some());
    let other = store
        .claim(&scope, &claim_req(fingerprint("other"), 30_000))
        .await
        .unwrap();
    assert_eq!(other.response, ClaimResponse::Conflict);
}

#[tokio::test]
async fn finalized_replayable_response_replays_exactly_to_the_same_fingerprint() {
    let store = store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("replay"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();

    let answer = store.claim(&scope, &req).await.unwrap();
    assert_eq!(
        answer.response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    let other = store
        .claim(&scope, &claim_req(fingerprint("different body"), 10_000))
        .await
        .unwrap();
    assert_eq!(other.response, ClaimResponse::Conflict);
}

#[tokio::test]
async fn finalized_unreplayable_response_answers_not_replayable() {
    let store = store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("too large"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    let finalize = FinalizeRequest {
        claim_id,
        response: StoredResponse::new(200, vec![], b""),
        replayable: false,
        previous_scope: None,
    };
    store.finalize(&scope, finalize).await.unwrap();
    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::NotReplayable
    );
}

#[tokio::test]
async fn finalize_rejects_an_invalid_status_and_keeps_the_lease() {
    let store = store().await;
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(fingerprint("b64"), 10_000)).await;
    let mut bad = finalize_ok(claim_id);
    bad.response.status = 99;
    assert!(matches!(
        store.finalize(&scope, bad).await,
        Err(StoreError::Rejected(_))
    ));
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
}

#[tokio::test]
async fn out_of_range_lease_is_invalid() {
    let store = store().await;
    let scope = fresh_scope();
    for lease_ms in [0, u64::MAX, i64::MAX as u64] {
        let answer = store
            .claim(&scope, &claim_req(fingerprint("range"), lease_ms))
            .await;
        assert!(
            matches!(
                answer,
                Err(StoreError::Invalid(_) | StoreError::Rejected(_))
            ),
            "lease_ms {lease_ms}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn renew_extends_the_lease_of_its_owner() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("renewed"), 300);
    let (claim_id, fence, _) = must_win(&store, &scope, &req).await;
    let renewed = store
        .renew(
            &scope,
            &RenewRequest {
                claim_id,
                lease_ms: 60_000,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(renewed.lease_ms, 60_000);
    let ms_left: f64 = db
        .query_one(
            "SELECT extract(epoch FROM lease_expires_at - clock_timestamp())::float8 * 1000
               FROM keyflight_records WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ms_left > 30_000.0, "lease not extended: {ms_left} ms left");
    assert!(matches!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::InProgress { .. }
    ));
    assert_eq!(row_state(&db, &scope).await.unwrap().1, fence);
}

#[tokio::test]
async fn release_cooldown_answers_cooldown_until_it_elapses_then_the_same_request_wins_again() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("flaky upstream"), 10_000);
    let (claim_id, fence, _) = must_win(&store, &scope, &req).await;
    store
        .release(
            &scope,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Cooldown,
                cooldown_ms: Some(400),
                previous_scope: None,
            },
        )
        .await
        .unwrap();

    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Cooldown { retry_after_s: 1 }
    );
    assert_eq!(
        store
            .claim(&scope, &claim_req(fingerprint("another body"), 10_000))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );
    wait_for_lease_expiry(&db, &scope).await;
    let (_, new_fence, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
    assert!(new_fence > fence);
}

#[tokio::test]
async fn release_cooldown_without_a_duration_uses_the_default() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("default cooldown"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store
        .release(
            &scope,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Cooldown,
                cooldown_ms: None,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    let cooldown_ms: f64 = db
        .query_one(
            "SELECT extract(epoch FROM lease_expires_at - updated_at)::float8 * 1000
               FROM keyflight_records WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap()
        .get(0);
    // support's default cooldown is 300 ms.
    assert!(
        (cooldown_ms - 300.0).abs() < 50.0,
        "cooldown was {cooldown_ms} ms"
    );
}

#[tokio::test]
async fn release_unknown_holds_every_claim_until_an_operator_resolves_it() {
    let store = store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("uncertain"), 10_000);
    let (claim_id, fence, _) = must_win(&store, &scope, &req).await;
    let release = ReleaseRequest {
        claim_id,
        release_as: ReleaseAs::Unknown,
        cooldown_ms: None,
        previous_scope: None,
    };
    store.release(&scope, &release).await.unwrap();
    // A repeat by the same claim (the outbox resending an unanswered call) is a success.
    store.release(&scope, &release).await.unwrap();

    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Unknown { fence: Some(fence) },
        "the answer names the run whose outcome is uncertain (uncertain: reconcile asks about it)"
    );
    assert_eq!(
        store
            .claim(&scope, &claim_req(fingerprint("other"), 10_000))
            .await
            .unwrap()
            .response,
        ClaimResponse::Conflict
    );

    let resolve = keyflight_protocol::wire::ResolveRequest {
        resolve_as: keyflight_protocol::wire::ResolveAs::Completed,
        response: Some(sample_response()),
        reason: "test".into(),
    };
    store.resolve(&scope, &resolve, "operator").await.unwrap();
    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    assert!(matches!(
        store.resolve(&scope, &resolve, "operator").await,
        Err(StoreError::NotUnknown)
    ));
}

#[tokio::test]
async fn release_forget_lets_the_next_claim_start_fresh() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("forbidden"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store
        .release(
            &scope,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Forget,
                cooldown_ms: None,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    assert!(row_state(&db, &scope).await.is_none());
    let (_, _, how) = must_win(&store, &scope, &claim_req(fingerprint("any"), 10_000)).await;
    assert_eq!(how, WonHow::Claimed);
}
