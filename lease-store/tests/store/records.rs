//! L6 against a real Postgres: the operator's list, get, resolve and erase.

#![allow(clippy::unwrap_used)]

use crate::support::*;
use keyflight_lease_store::store::{Store, StoreError};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimResponse, RecordState, ReleaseAs, ReleaseRequest, ResolveAs, ResolveRequest, WonHow,
};

/// Claims `scope` and releases it as `unknown`.
async fn unknown_record(store: &Store, scope: &Digest, label: &str) {
    released_record(store, scope, label, ReleaseAs::Unknown, None).await;
}

/// Claims `scope` and releases it as `release_as`.
async fn released_record(
    store: &Store,
    scope: &Digest,
    label: &str,
    release_as: ReleaseAs,
    cooldown_ms: Option<u64>,
) {
    let (claim_id, _, _) = must_win(store, scope, &claim_req(fingerprint(label), 10_000)).await;
    store
        .release(
            scope,
            &ReleaseRequest {
                claim_id,
                release_as,
                cooldown_ms,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn get_shows_a_completed_record_with_its_response() {
    let store = store().await;
    let scope = fresh_scope();
    let (claim_id, fence, _) =
        must_win(&store, &scope, &claim_req(fingerprint("shown"), 10_000)).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();

    let detail = store.get(&scope).await.unwrap();
    assert_eq!(detail.summary.scope, scope);
    assert_eq!(detail.summary.state, RecordState::Completed);
    assert_eq!(detail.summary.fingerprint, fingerprint("shown"));
    assert_eq!(detail.summary.fence, fence);
    assert_eq!(detail.summary.status, Some(201));
    assert!(detail.summary.replayable);
    assert!(detail.summary.lease_expires_at.is_none());
    assert!(detail.summary.created_at.ends_with('Z'));
    assert!(detail.summary.expires_at > detail.summary.created_at);
    assert_eq!(detail.response, Some(sample_response()));
}

#[tokio::test]
async fn get_of_a_missing_record_is_not_found() {
    let store = store().await;
    assert!(matches!(
        store.get(&fresh_scope()).await,
        Err(StoreError::NotFound)
    ));
}

#[tokio::test]
async fn list_filters_by_state_newest_first() {
    let store = store().await;
    let first = fresh_scope();
    let second = fresh_scope();
    unknown_record(&store, &first, "list one").await;
    unknown_record(&store, &second, "list two").await;

    let listed = store.list(Some(RecordState::Unknown), 1000).await.unwrap();
    assert!(
        listed
            .records
            .iter()
            .all(|r| r.state == RecordState::Unknown)
    );
    let position = |scope| listed.records.iter().position(|r| r.scope == scope);
    assert!(position(second).unwrap() < position(first).unwrap());
    assert_eq!(store.list(None, 1).await.unwrap().records.len(), 1);
}

/// The list reads each state's newest from the state index and merges them
/// (`LIST_SQL`): a record of any state the table allows is listed, in creation
/// order across states.
#[tokio::test]
async fn every_state_is_listed() {
    let store = store().await;
    let completed = fresh_scope();
    let (claim_id, _, _) = must_win(
        &store,
        &completed,
        &claim_req(fingerprint("listed"), 10_000),
    )
    .await;
    store
        .finalize(&completed, finalize_ok(claim_id))
        .await
        .unwrap();
    let failed = fresh_scope();
    released_record(&store, &failed, "listed", ReleaseAs::Cooldown, Some(60_000)).await;
    let unknown = fresh_scope();
    unknown_record(&store, &unknown, "listed").await;
    let pending = fresh_scope();
    must_win(&store, &pending, &claim_req(fingerprint("listed"), 10_000)).await;

    let listed = store.list(None, 100_000).await.unwrap();
    let position = |scope| listed.records.iter().position(|r| r.scope == scope);
    let positions: Vec<_> = [pending, unknown, failed, completed]
        .into_iter()
        .map(position)
        .collect();
    assert!(
        positions.iter().all(Option::is_some),
        "every state listed: {positions:?}"
    );
    assert!(
        positions.is_sorted(),
        "newest first across states: {positions:?}"
    );
}

#[tokio::test]
async fn resolve_failed_lets_the_same_request_run_again() {
    let store = store().await;
    let scope = fresh_scope();
    unknown_record(&store, &scope, "did not happen").await;
    store
        .resolve(
            &scope,
            &ResolveRequest {
                resolve_as: ResolveAs::Failed,
                response: None,
                reason: "test".into(),
            },
            "operator",
        )
        .await
        .unwrap();
    let (_, _, how) = must_win(
        &store,
        &scope,
        &claim_req(fingerprint("did not happen"), 10_000),
    )
    .await;
    assert_eq!(how, WonHow::RecoveredAbandoned);
}

#[tokio::test]
async fn resolve_completed_without_a_response_is_not_replayable() {
    let store = store().await;
    let scope = fresh_scope();
    unknown_record(&store, &scope, "happened, response lost").await;
    store
        .resolve(
            &scope,
            &ResolveRequest {
                resolve_as: ResolveAs::Completed,
                response: None,
                reason: "test".into(),
            },
            "operator",
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .claim(
                &scope,
                &claim_req(fingerprint("happened, response lost"), 10_000)
            )
            .await
            .unwrap()
            .response,
        ClaimResponse::NotReplayable
    );
}

#[tokio::test]
async fn resolve_refuses_records_that_are_not_unknown_or_missing() {
    let store = store().await;
    let scope = fresh_scope();
    must_win(&store, &scope, &claim_req(fingerprint("running"), 10_000)).await;
    let resolve = ResolveRequest {
        resolve_as: ResolveAs::Failed,
        response: None,
        reason: "test".into(),
    };
    assert!(matches!(
        store.resolve(&scope, &resolve, "operator").await,
        Err(StoreError::NotUnknown)
    ));
    assert!(matches!(
        store.resolve(&fresh_scope(), &resolve, "operator").await,
        Err(StoreError::NotFound)
    ));
}

#[tokio::test]
async fn erase_deletes_a_record_in_any_state() {
    let store = store().await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("erased"), 10_000);
    must_win(&store, &scope, &req).await;
    store.erase(&scope, "operator", "test").await.unwrap();
    assert!(matches!(
        store.erase(&scope, "operator", "test").await,
        Err(StoreError::NotFound)
    ));
    let (_, _, how) = must_win(&store, &scope, &req).await;
    assert_eq!(how, WonHow::Claimed);
}

/// The console reads a record's audit by scope, newest first (`AUDIT_SQL`). Planned as the
/// store's sessions plan it, the migrated schema finds the scope's rows through an index on
/// the scope, instead of walking every decision ever audited by `id` and filtering
/// (`docs/records.md#the-indexes`).
#[tokio::test]
async fn the_audit_of_a_scope_is_read_through_its_index() {
    let client = raw_client(&cluster().url()).await;
    let settings: String = keyflight_store_core::session::PLANNER_SETTINGS
        .map(|(name, value)| format!("SET {name} = {value};"))
        .join(" ");
    client
        .batch_execute(&format!(
            "{settings} PREPARE audit_by_scope(bytea) AS {}",
            keyflight_store_core::sql::records::AUDIT_SQL
        ))
        .await
        .unwrap();
    let plan: Vec<String> = client
        .query("EXPLAIN EXECUTE audit_by_scope(NULL)", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("keyflight_operator_audit_scope_idx")
            && plan.contains("Cond: (scope = $1)")
            && !plan.contains("Filter: (scope = $1)"),
        "{plan}"
    );
}
