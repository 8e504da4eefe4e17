//! Claims across a recipe change against a real Postgres
//! (`docs/records.md#claims-across-a-recipe-change`): one claim holds the scopes of both
//! recipes or neither; a record under either decides; every settle covers both.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{Store, StoreError};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, PreviousIdentity, ReleaseAs, ReleaseRequest, RenewRequest, WonHow,
};
use keyflight_testkit::process::eventually;
use tokio::sync::Barrier;
use tokio::sync::watch;

/// The same request under the new recipe (`new`) and the previous one (`old`).
struct Recipes {
    new: (Digest, Digest),
    old: (Digest, Digest),
}

impl Recipes {
    fn fresh(body: &str) -> Recipes {
        Recipes {
            new: (fresh_scope(), fingerprint(&format!("new {body}"))),
            old: (fresh_scope(), fingerprint(&format!("old {body}"))),
        }
    }

    /// A proxy on the new recipe naming the previous one: the dual claim.
    fn dual(&self) -> (Digest, ClaimRequest) {
        let mut req = claim_req(self.new.1, 30_000);
        req.previous = Some(PreviousIdentity {
            scope: self.old.0,
            fingerprint: self.old.1,
        });
        (self.new.0, req)
    }

    /// A proxy still on the old recipe: a plain claim under its own scope.
    fn old_only(&self) -> (Digest, ClaimRequest) {
        (self.old.0, claim_req(self.old.1, 30_000))
    }

    /// A proxy on the new recipe that no longer names the previous one.
    fn new_only(&self) -> (Digest, ClaimRequest) {
        (self.new.0, claim_req(self.new.1, 30_000))
    }

    /// After a rollback: the old recipe is current again and names the new one as previous.
    fn dual_rolled_back(&self) -> (Digest, ClaimRequest) {
        let mut req = claim_req(self.old.1, 30_000);
        req.previous = Some(PreviousIdentity {
            scope: self.new.0,
            fingerprint: self.new.1,
        });
        (self.old.0, req)
    }
}

async fn answer(store: &Store, (scope, req): &(Digest, ClaimRequest)) -> ClaimResponse {
    store.claim(scope, req).await.unwrap().response
}

/// Racers on one recipe alone and on both get one winner. (A proxy on the old recipe
/// alone and one on the new recipe alone share nothing: that is why the transition
/// lasts until no proxy runs the old recipe, `docs/operations.md#upgrades`.)
#[tokio::test]
async fn racers_on_one_recipe_and_on_both_get_one_winner() {
    let store = store().await;
    for round in 0..8 {
        let recipes = Recipes::fresh(&format!("race {round}"));
        let alone = if round % 2 == 0 {
            recipes.old_only()
        } else {
            recipes.new_only()
        };
        let calls = [recipes.dual(), alone, recipes.dual_rolled_back()];
        let barrier = Arc::new(Barrier::new(calls.len() * 6));
        let tasks: Vec<_> = (0..6)
            .flat_map(|_| calls.clone())
            .map(|call| {
                let (store, barrier) = (store.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    answer(&store, &call).await
                })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            match task.await.unwrap() {
                ClaimResponse::Won { .. } => won += 1,
                ClaimResponse::InProgress { .. } => {}
                other => panic!("round {round}: unexpected answer {other:?}"),
            }
        }
        assert_eq!(
            won, 1,
            "round {round}: exactly one winner across both recipes"
        );
    }
}

#[tokio::test]
async fn a_dual_claim_holds_both_scopes_and_its_finalize_completes_both() {
    let store = store().await;
    let recipes = Recipes::fresh("finalize");
    let (scope, req) = recipes.dual();
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    // A proxy on either recipe alone now finds a running request.
    assert!(matches!(
        answer(&store, &recipes.old_only()).await,
        ClaimResponse::InProgress { .. }
    ));
    assert!(matches!(
        answer(&store, &recipes.new_only()).await,
        ClaimResponse::InProgress { .. }
    ));
    let renew = RenewRequest {
        claim_id,
        lease_ms: 30_000,
        previous_scope: Some(recipes.old.0),
    };
    store.renew(&scope, &renew).await.unwrap();
    let mut finalize = finalize_ok(claim_id);
    finalize.previous_scope = Some(recipes.old.0);
    store.finalize(&scope, finalize.clone()).await.unwrap();
    // A repeat of the finalize (the outbox resending it) is a success.
    store.finalize(&scope, finalize).await.unwrap();
    for call in [
        recipes.old_only(),
        recipes.new_only(),
        recipes.dual(),
        recipes.dual_rolled_back(),
    ] {
        assert_eq!(
            answer(&store, &call).await,
            ClaimResponse::Completed {
                response: sample_response()
            },
            "the same request replays under either recipe"
        );
    }
    // Another body under either recipe is a conflict.
    let other = Recipes {
        new: (recipes.new.0, fingerprint("another body, new")),
        old: (recipes.old.0, fingerprint("another body, old")),
    };
    for call in [other.old_only(), other.new_only(), other.dual()] {
        assert_eq!(answer(&store, &call).await, ClaimResponse::Conflict);
    }
}

#[tokio::test]
async fn a_record_under_either_scope_decides_a_dual_claim() {
    let store = store().await;
    // An old proxy ran it and recorded its answer: the new recipe replays it.
    let recipes = Recipes::fresh("old ran");
    let (old_scope, old_req) = recipes.old_only();
    let (claim_id, _, _) = must_win(&store, &old_scope, &old_req).await;
    assert!(matches!(
        answer(&store, &recipes.dual()).await,
        ClaimResponse::InProgress { .. }
    ));
    store
        .finalize(&old_scope, finalize_ok(claim_id))
        .await
        .unwrap();
    assert_eq!(
        answer(&store, &recipes.dual()).await,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    // The losing dual claims left no record under the new scope.
    assert!(matches!(
        answer(&store, &recipes.new_only()).await,
        ClaimResponse::Won { .. }
    ));

    // Another body under the old recipe only: a conflict, and nothing claimed.
    let recipes = Recipes::fresh("conflict");
    let (old_scope, _) = recipes.old_only();
    must_win(&store, &old_scope, &claim_req(fingerprint("other"), 30_000)).await;
    assert_eq!(
        answer(&store, &recipes.dual()).await,
        ClaimResponse::Conflict
    );
    assert!(matches!(
        answer(&store, &recipes.new_only()).await,
        ClaimResponse::Won { .. }
    ));
}

#[tokio::test]
async fn a_release_of_a_dual_claim_settles_both_records() {
    let store = store().await;
    let recipes = Recipes::fresh("release");
    let (scope, req) = recipes.dual();
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    let release = ReleaseRequest {
        claim_id,
        release_as: ReleaseAs::Unknown,
        cooldown_ms: None,
        previous_scope: Some(recipes.old.0),
    };
    store.release(&scope, &release).await.unwrap();
    assert_eq!(
        fenceless(answer(&store, &recipes.old_only()).await),
        ClaimResponse::Unknown { fence: None }
    );
    assert_eq!(
        fenceless(answer(&store, &recipes.new_only()).await),
        ClaimResponse::Unknown { fence: None }
    );

    let recipes = Recipes::fresh("forget");
    let (scope, req) = recipes.dual();
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    let release = ReleaseRequest {
        claim_id,
        release_as: ReleaseAs::Forget,
        cooldown_ms: None,
        previous_scope: Some(recipes.old.0),
    };
    store.release(&scope, &release).await.unwrap();
    assert!(matches!(
        answer(&store, &recipes.old_only()).await,
        ClaimResponse::Won { .. }
    ));
}

#[tokio::test]
async fn one_scope_under_two_fingerprints_is_one_record() {
    let store = store().await;
    let scope = fresh_scope();
    let (old_fp, new_fp) = (fingerprint("fp v1"), fingerprint("fp v2"));
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(old_fp, 30_000)).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    let mut dual = claim_req(new_fp, 30_000);
    dual.previous = Some(PreviousIdentity {
        scope,
        fingerprint: old_fp,
    });
    assert_eq!(
        store.claim(&scope, &dual).await.unwrap().response,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    dual.fingerprint = fingerprint("another body");
    dual.previous = Some(PreviousIdentity {
        scope,
        fingerprint: fingerprint("another body, v1"),
    });
    assert_eq!(
        store.claim(&scope, &dual).await.unwrap().response,
        ClaimResponse::Conflict
    );
}

/// A dual claim that meets the request running under the old recipe's scope (an old
/// proxy won it) long-polls on both scopes, and the old proxy's finalize wakes it at once,
/// long before the winner's lease would end.
#[tokio::test]
async fn a_dual_follower_is_woken_by_a_settle_under_the_old_scope() {
    let (_shutdown, shutdown_rx) = watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&cluster().url(), shutdown_rx);
    let settle = Duration::from_secs(10);
    eventually("the LISTEN connection is up", settle, || async {
        longpoll.listening()
    })
    .await;
    let store = store().await;
    let recipes = Recipes::fresh("follower");
    let (old_scope, old_req) = recipes.old_only();
    let (claim_id, _, _) = must_win(&store, &old_scope, &old_req).await;
    let (scope, mut req) = recipes.dual();
    req.wait_ms = Some(30_000);
    let follower = {
        let (store, longpoll) = (store.clone(), longpoll.clone());
        tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &req).await })
    };
    eventually("the dual follower parked", settle, || async {
        longpoll.waiting() == 1
    })
    .await;
    let finalized_at = Instant::now();
    store
        .finalize(&old_scope, finalize_ok(claim_id))
        .await
        .unwrap();
    let answer = follower.await.unwrap().unwrap();
    assert_eq!(
        answer,
        ClaimResponse::Completed {
            response: sample_response()
        }
    );
    assert!(
        finalized_at.elapsed() < Duration::from_secs(5),
        "woken by the settle, not by the 30 s lease: {:?}",
        finalized_at.elapsed()
    );
}

/// A dual claim whose lease ran out and whose record under one scope was taken over (by a
/// proxy on that recipe alone) has lost its lease: its settles are refused on both records,
/// so the two recipes never keep two different answers of one request.
#[tokio::test]
async fn a_dual_claim_taken_over_under_one_scope_settles_neither() {
    let store = store().await;
    let db = raw_client(&cluster().url()).await;
    let recipes = Recipes::fresh("taken over");
    let (scope, mut req) = recipes.dual();
    req.lease_ms = 200;
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    wait_for_lease_expiry(&db, &recipes.new.0).await;
    let (new_scope, new_only) = recipes.new_only();
    let (taker, _, how) = must_win(&store, &new_scope, &new_only).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);

    let renew = RenewRequest {
        claim_id,
        lease_ms: 30_000,
        previous_scope: Some(recipes.old.0),
    };
    assert!(matches!(
        store.renew(&scope, &renew).await,
        Err(StoreError::LeaseLost)
    ));
    let mut finalize = finalize_ok(claim_id);
    finalize.previous_scope = Some(recipes.old.0);
    assert!(matches!(
        store.finalize(&scope, finalize).await,
        Err(StoreError::LeaseLost)
    ));
    // Nothing was recorded under the old recipe's scope either: it is still the expired
    // dual claim's, for a takeover.
    let (state, _, holder) = row_state(&db, &recipes.old.0).await.unwrap();
    assert_eq!((state.as_str(), holder), ("pending", Some(claim_id)));
    store
        .finalize(&recipes.new.0, finalize_ok(taker))
        .await
        .unwrap();
}

/// A dual release answers the stamps of the record the claim was made under.
#[tokio::test]
async fn a_dual_release_carries_the_stamps_of_its_own_record() {
    let store = store().await;
    let recipes = Recipes::fresh("stamped");
    let (scope, req) = recipes.dual();
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    let released = store
        .release(
            &scope,
            &ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Cooldown,
                cooldown_ms: Some(5_000),
                previous_scope: Some(recipes.old.0),
            },
        )
        .await
        .unwrap();
    let (Some(at), Some(ends)) = (released.at, released.cooldown_ends_at) else {
        panic!("a cooldown release names both stamps: {released:?}");
    };
    assert!((4_999..=5_001).contains(&ends.duration_since(at).unwrap().as_millis()));
}
