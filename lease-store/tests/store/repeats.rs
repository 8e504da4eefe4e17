//! Settle calls are idempotent for their own claim: the filter's record outbox
//! resends a finalize or release whose answer it never saw, and the repeat of
//! a call that landed must answer success, never `lease_lost`. A claim that
//! lost its lease still gets `lease_lost`, repeat or not.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::support::*;
use keyflight_lease_store::store::StoreError;
use keyflight_protocol::wire::{ClaimResponse, ReleaseAs, ReleaseRequest, WonHow};

fn release(claim_id: uuid::Uuid, release_as: ReleaseAs) -> ReleaseRequest {
    ReleaseRequest {
        claim_id,
        release_as,
        cooldown_ms: Some(60_000),
        previous_scope: None,
    }
}

#[tokio::test]
async fn a_repeated_finalize_succeeds_and_keeps_the_first_record() {
    let store = store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("repeat-finalize"), 10_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    let mut different = finalize_ok(claim_id);
    different.response.status = 500;
    store.finalize(&scope, different).await.unwrap();
    assert_eq!(
        store.claim(&scope, &req).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        },
        "the repeat changed nothing"
    );
}

#[tokio::test]
async fn repeated_releases_succeed_for_every_kind() {
    let store = store().await;
    for kind in [ReleaseAs::Cooldown, ReleaseAs::Unknown, ReleaseAs::Forget] {
        let scope = fresh_scope();
        let req = claim_req(fingerprint("repeat-release"), 10_000);
        let (claim_id, _, _) = must_win(&store, &scope, &req).await;
        store
            .release(&scope, &release(claim_id, kind))
            .await
            .unwrap();
        store
            .release(&scope, &release(claim_id, kind))
            .await
            .unwrap_or_else(|e| panic!("repeat of {kind:?}: {e}"));
    }
}

#[tokio::test]
async fn a_settle_of_another_kind_than_the_landed_one_is_lease_lost() {
    let store = store().await;
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(fingerprint("k"), 10_000)).await;
    store
        .release(&scope, &release(claim_id, ReleaseAs::Unknown))
        .await
        .unwrap();
    assert!(matches!(
        store.finalize(&scope, finalize_ok(claim_id)).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store
            .release(&scope, &release(claim_id, ReleaseAs::Cooldown))
            .await,
        Err(StoreError::LeaseLost)
    ));
}

#[tokio::test]
async fn a_repeat_after_the_lease_was_stolen_is_lease_lost() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("stolen"), 1000);
    let (old_claim, _, _) = must_win(&store, &scope, &req).await;
    wait_for_lease_expiry(&db, &scope).await;
    let (new_claim, _, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
    store
        .finalize(&scope, finalize_ok(new_claim))
        .await
        .unwrap();
    assert!(matches!(
        store.finalize(&scope, finalize_ok(old_claim)).await,
        Err(StoreError::LeaseLost)
    ));
    for kind in [ReleaseAs::Cooldown, ReleaseAs::Unknown, ReleaseAs::Forget] {
        assert!(
            matches!(
                store.release(&scope, &release(old_claim, kind)).await,
                Err(StoreError::LeaseLost)
            ),
            "{kind:?} by the old claim"
        );
    }
    assert_eq!(row_state(&db, &scope).await.unwrap().2, Some(new_claim));
}

#[tokio::test]
async fn concurrent_duplicates_of_one_finalize_all_succeed() {
    let store = Arc::new(store().await);
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(fingerprint("dup"), 10_000)).await;
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.finalize(&scope, finalize_ok(claim_id)).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
}

/// A release answers when the database applied it and when its cooldown ends, on the
/// database's clock; its repeat reads the same stamps back (a fault run's judge times the
/// record from them: `chaos/README.md#known-gaps`). Only a forget's repeat has no row to read.
#[tokio::test]
async fn a_release_and_its_repeat_carry_the_databases_stamps() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let scope = fresh_scope();
    let (claim_id, _, _) =
        must_win(&store, &scope, &claim_req(fingerprint("stamped"), 10_000)).await;
    let first = store
        .release(&scope, &release(claim_id, ReleaseAs::Cooldown))
        .await
        .unwrap();
    let (Some(at), Some(ends)) = (first.at, first.cooldown_ends_at) else {
        panic!("a cooldown release names both stamps: {first:?}");
    };
    assert!(!first.repeat);
    let cooldown = ends.duration_since(at).unwrap();
    assert!(
        (59_999..=60_001).contains(&cooldown.as_millis()),
        "the cooldown runs from the release: {cooldown:?}"
    );
    let row = db
        .query_one(
            "SELECT updated_at, lease_expires_at FROM keyflight_records WHERE scope = $1",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap();
    let stored: (std::time::SystemTime, std::time::SystemTime) = (row.get(0), row.get(1));
    assert_eq!((at, ends), stored, "the stamps are the record's");
    let repeat = store
        .release(&scope, &release(claim_id, ReleaseAs::Cooldown))
        .await
        .unwrap();
    assert_eq!(
        (repeat.repeat, repeat.at, repeat.cooldown_ends_at),
        (true, Some(at), Some(ends))
    );

    let scope = fresh_scope();
    let (claim_id, _, _) =
        must_win(&store, &scope, &claim_req(fingerprint("forgot"), 10_000)).await;
    let before = std::time::SystemTime::now();
    let forgot = store
        .release(&scope, &release(claim_id, ReleaseAs::Forget))
        .await
        .unwrap();
    assert!(
        forgot
            .at
            .is_some_and(|at| at >= before - std::time::Duration::from_secs(1))
    );
    assert_eq!(forgot.cooldown_ends_at, None);
    let again = store
        .release(&scope, &release(claim_id, ReleaseAs::Forget))
        .await
        .unwrap();
    assert_eq!((again.repeat, again.at), (true, None));
}
