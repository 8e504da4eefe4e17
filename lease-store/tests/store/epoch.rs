//! F9 against a real Postgres: the operator epoch moves with exactly the
//! changes that make an edge-cached record wrong (migration V4).
//!
//! One test, run step by step: the epoch is one number for the whole
//! database, and this binary's cluster is its own, so nothing else moves it.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use keyflight_protocol::wire::{ReleaseAs, ReleaseRequest, ResolveAs, ResolveRequest};

#[tokio::test]
async fn erase_resolve_and_reclaim_bump_the_epoch_and_nothing_else_does() {
    let store = store().await;
    let client = raw_client(&cluster().url()).await;
    let start = store.epoch().await.unwrap();
    let release = |claim_id, release_as| ReleaseRequest {
        claim_id,
        release_as,
        cooldown_ms: None,
        previous_scope: None,
    };

    // The data path never moves it: finalize, forget, unknown, cooldown.
    let completed = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &completed, &claim_req(fingerprint("c"), 10_000)).await;
    store
        .finalize(&completed, finalize_ok(claim_id))
        .await
        .unwrap();
    let forgotten = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &forgotten, &claim_req(fingerprint("f"), 10_000)).await;
    store
        .release(&forgotten, &release(claim_id, ReleaseAs::Forget))
        .await
        .unwrap();
    let unknown = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &unknown, &claim_req(fingerprint("u"), 10_000)).await;
    store
        .release(&unknown, &release(claim_id, ReleaseAs::Unknown))
        .await
        .unwrap();
    let cooled = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &cooled, &claim_req(fingerprint("k"), 10_000)).await;
    store
        .release(&cooled, &release(claim_id, ReleaseAs::Cooldown))
        .await
        .unwrap();
    assert_eq!(store.epoch().await.unwrap(), start, "data-path writes");

    // An operator's resolve and erase each move it by one.
    store
        .resolve(
            &unknown,
            &ResolveRequest {
                resolve_as: ResolveAs::Completed,
                response: Some(sample_response()),
                reason: "test".into(),
            },
            "operator",
        )
        .await
        .unwrap();
    assert_eq!(store.epoch().await.unwrap(), start + 1, "resolve");
    store.erase(&completed, "operator", "test").await.unwrap();
    assert_eq!(store.epoch().await.unwrap(), start + 2, "erase");

    // Erasing a pending record does not (no edge caches one)…
    let pending = fresh_scope();
    must_win(&store, &pending, &claim_req(fingerprint("p"), 10_000)).await;
    store.erase(&pending, "operator", "test").await.unwrap();
    assert_eq!(
        store.epoch().await.unwrap(),
        start + 2,
        "erase of a pending record"
    );

    // …nor does the cleanup of a record past its retention…
    let expired = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &expired, &claim_req(fingerprint("e"), 10_000)).await;
    store
        .finalize(&expired, finalize_ok(claim_id))
        .await
        .unwrap();
    age_past_retention(&client, &expired).await;
    while store.delete_expired_batch(1000).await.unwrap() > 0 {}
    assert_eq!(row_state(&client, &expired).await, None, "cleaned up");
    assert_eq!(store.epoch().await.unwrap(), start + 2, "retention cleanup");

    // …but reusing a completed record past its retention does: an edge may
    // still hold the old answer for that scope.
    let reused = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &reused, &claim_req(fingerprint("r"), 10_000)).await;
    store
        .finalize(&reused, finalize_ok(claim_id))
        .await
        .unwrap();
    age_past_retention(&client, &reused).await;
    must_win(&store, &reused, &claim_req(fingerprint("r2"), 10_000)).await;
    assert_eq!(
        store.epoch().await.unwrap(),
        start + 3,
        "reclaim past retention"
    );
}
