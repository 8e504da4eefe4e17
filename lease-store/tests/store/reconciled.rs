//! `uncertain: reconcile` against a real Postgres: an `unknown` record settled with what
//! the service's ledger said, only at the fence and fingerprint it was asked about, and
//! audited in the same statement (`docs/reconcile.md#what-the-store-records`).

use crate::support::*;
use keyflight_lease_store::store::{Store, StoreError};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::reconcile::ReconciledRequest;
use keyflight_protocol::wire::{ClaimResponse, ReleaseAs, ReleaseRequest, StoredResponse, WonHow};

const ACTOR: &str = "reconciler:spiffe://cluster.local/ns/payments/sa/checkout";

/// Claims `scope` for `label` and releases it `unknown`; returns the claim's fence.
async fn unknown_at(store: &Store, scope: &Digest, label: &str) -> i64 {
    let (claim_id, fence, _) = must_win(store, scope, &claim_req(fingerprint(label), 10_000)).await;
    let release = ReleaseRequest {
        claim_id,
        release_as: ReleaseAs::Unknown,
        cooldown_ms: None,
        previous_scope: None,
    };
    store.release(scope, &release).await.unwrap();
    fence
}

fn report(label: &str, fence: i64, response: Option<StoredResponse>) -> ReconciledRequest {
    let fingerprint = fingerprint(label);
    match response {
        Some(response) => ReconciledRequest::Committed {
            fingerprint,
            fence,
            response,
        },
        None => ReconciledRequest::Absent { fingerprint, fence },
    }
}

async fn audit_actions(scope: &Digest) -> Vec<(String, String)> {
    raw_client(&cluster().url())
        .await
        .query(
            "SELECT actor, action FROM keyflight_operator_audit WHERE scope = $1 ORDER BY id",
            &[&scope.0.as_slice()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test]
async fn committed_makes_every_retry_replay_the_services_answer() {
    let store = store().await;
    let scope = fresh_scope();
    let fence = unknown_at(&store, &scope, "paid").await;
    let first_run = sample_response();
    store
        .reconciled(
            &scope,
            &report("paid", fence, Some(first_run.clone())),
            ACTOR,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .claim(&scope, &claim_req(fingerprint("paid"), 10_000))
            .await
            .unwrap()
            .response,
        ClaimResponse::Completed {
            response: first_run
        }
    );
    assert_eq!(
        audit_actions(&scope).await,
        [(ACTOR.to_owned(), "reconciled_committed".to_owned())]
    );
}

#[tokio::test]
async fn absent_lets_the_same_request_run_under_a_higher_fence() {
    let store = store().await;
    let scope = fresh_scope();
    let fence = unknown_at(&store, &scope, "never ran").await;
    store
        .reconciled(&scope, &report("never ran", fence, None), ACTOR)
        .await
        .unwrap();
    let (_, next, how) =
        must_win(&store, &scope, &claim_req(fingerprint("never ran"), 10_000)).await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
    assert!(next > fence, "fence {next} after {fence}");
    assert_eq!(
        audit_actions(&scope).await,
        [(ACTOR.to_owned(), "reconciled_absent".to_owned())]
    );
}

#[tokio::test]
async fn a_report_about_another_run_body_or_a_settled_record_changes_nothing() {
    let store = store().await;
    let scope = fresh_scope();
    let fence = unknown_at(&store, &scope, "held").await;
    for stale in [
        report("held", fence - 1, None),
        report("another body", fence, None),
        report("held", fence + 1, Some(sample_response())),
    ] {
        assert!(
            matches!(
                store.reconciled(&scope, &stale, ACTOR).await,
                Err(StoreError::NotUnknown)
            ),
            "{stale:?}"
        );
    }
    assert_eq!(
        fenceless(
            store
                .claim(&scope, &claim_req(fingerprint("held"), 10_000))
                .await
                .unwrap()
                .response
        ),
        ClaimResponse::Unknown { fence: None },
        "still held"
    );
    store
        .reconciled(&scope, &report("held", fence, None), ACTOR)
        .await
        .unwrap();
    assert!(
        matches!(
            store
                .reconciled(
                    &scope,
                    &report("held", fence, Some(sample_response())),
                    ACTOR
                )
                .await,
            Err(StoreError::NotUnknown)
        ),
        "a second, contradicting report is refused"
    );
    assert_eq!(audit_actions(&scope).await.len(), 1);
    assert!(matches!(
        store
            .reconciled(&fresh_scope(), &report("held", fence, None), ACTOR)
            .await,
        Err(StoreError::NotFound)
    ));
}
