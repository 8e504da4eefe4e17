//! Switching an installation to the mesh identity without a double run
//! (`docs/configuration.md#switching-to-the-mesh-identity`): two replicas on one database,
//! one still on the shared namespace (bearer token), one under `--trust-xfcc
//! --namespace-transition`. The same request, sent once through each, runs once whichever
//! side made the record; without `--namespace-transition` it runs again.

#![allow(clippy::unwrap_used)]

use serde_json::json;

use crate::mesh_identity::{CART, CHECKOUT, claim_as, post_as};
use crate::support::*;

/// The settings of a replica moved to the mesh identity: CHECKOUT and CART allowed, no
/// bearer token.
async fn mesh_replica(database_url: &str, transition: bool) -> Server {
    let port = keyflight_testkit::process::free_port();
    let mut args = vec!["--trust-xfcc", "--workload", CHECKOUT, "--workload", CART];
    if transition {
        args.push("--namespace-transition");
    }
    let mut command = serve_command(database_url, port, &args);
    command.env_remove("KEYFLIGHT_TOKEN");
    start_command(command, port).await
}

/// A replica still on the shared namespace, and one moved under the transition (or not).
async fn fleet(transition: bool) -> (Server, Server) {
    let url = cluster().url();
    let shared = start_server_on(&url, &[]).await;
    let moved = mesh_replica(&url, transition).await;
    (shared, moved)
}

async fn finalize_as(api: &Api, id: &str, scope: &str, claim_id: &str) -> Answer {
    post_as(
        api,
        id,
        &format!("/v1/claims/{scope}/finalize"),
        &json!({ "claim_id": claim_id, "response": sample_response(), "replayable": true }),
    )
    .await
}

#[tokio::test]
async fn a_record_made_before_the_switch_is_followed_replayed_and_guarded_after_it() {
    let (shared, moved) = fleet(true).await;
    let (scope, fingerprint, claim_id) = shared.api.win("before-switch").await;

    // The retry through the moved replica follows the running request…
    let follower = tokio::spawn({
        let api = moved.api.clone();
        let (scope, fingerprint) = (scope.clone(), fingerprint.clone());
        async move { claim_as(&api, CHECKOUT, &scope, &fingerprint, 30_000).await }
    });
    moved
        .api
        .wait_counter("keyflight_store_longpoll_waiting", 1)
        .await;
    let recorded = shared.api.finalize(&scope, &claim_id).await;
    let followed = follower.await.unwrap();
    assert_eq!(followed.outcome(), "completed", "{}", followed.text);
    assert_eq!(followed.json["response"], recorded);

    // …is replayed the record later, and another body under the key is a conflict.
    let replay = claim_as(&moved.api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed", "{}", replay.text);
    assert_eq!(replay.json["response"], recorded);
    let other_body = claim_as(&moved.api, CHECKOUT, &scope, &fresh_digest("fp"), 0).await;
    assert_eq!(other_body.outcome(), "conflict", "{}", other_body.text);
}

#[tokio::test]
async fn a_record_made_after_the_switch_is_found_by_a_retry_still_on_the_shared_namespace() {
    let (shared, moved) = fleet(true).await;
    let (scope, fingerprint) = (fresh_digest("after-switch"), fresh_digest("fp"));
    let won = claim_as(&moved.api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();

    let running = shared.api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(running.outcome(), "in_progress", "{}", running.text);
    let finalized = finalize_as(&moved.api, CHECKOUT, &scope, &claim_id).await;
    assert_eq!(finalized.status, 200, "{}", finalized.text);

    let replay = shared.api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed", "{}", replay.text);
    assert_eq!(replay.json["response"], sample_response());
    let other_body = shared.api.claim(&scope, &fresh_digest("fp"), 0).await;
    assert_eq!(other_body.outcome(), "conflict", "{}", other_body.text);
    // The workload's own record holds it too: it outlives the transition.
    let own = claim_as(&moved.api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(own.outcome(), "completed", "{}", own.text);
}

#[tokio::test]
async fn a_claim_made_through_the_shared_namespace_settles_through_the_moved_replica() {
    // One filter, token and mesh identity both, whose claim and finalize reach different
    // replicas mid-rollout.
    let (shared, moved) = fleet(true).await;
    let (scope, fingerprint, claim_id) = shared.api.win("across-replicas").await;
    for attempt in ["first", "repeat"] {
        let finalized = finalize_as(&moved.api, CHECKOUT, &scope, &claim_id).await;
        assert_eq!(finalized.status, 200, "{attempt}: {}", finalized.text);
    }
    let replay = shared.api.claim(&scope, &fingerprint, 0).await;
    assert_eq!(replay.outcome(), "completed", "{}", replay.text);
    let moved_replay = claim_as(&moved.api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(moved_replay.outcome(), "completed", "{}", moved_replay.text);
}

#[tokio::test]
async fn without_the_transition_the_switch_runs_the_request_again() {
    let (shared, moved) = fleet(false).await;
    let (scope, fingerprint, claim_id) = shared.api.win("no-transition").await;
    shared.api.finalize(&scope, &claim_id).await;
    let again = claim_as(&moved.api, CHECKOUT, &scope, &fingerprint, 0).await;
    assert_eq!(again.outcome(), "won", "{}", again.text);
}

#[tokio::test]
async fn a_previous_recipe_during_the_transition_is_refused() {
    let (_shared, moved) = fleet(true).await;
    let scope = fresh_digest("two-transitions");
    let answer = post_as(
        &moved.api,
        CHECKOUT,
        &format!("/v1/claims/{scope}"),
        &json!({
            "fingerprint": fresh_digest("fp"),
            "lease_ms": 60_000,
            "previous": { "scope": fresh_digest("old"), "fingerprint": fresh_digest("fp") },
        }),
    )
    .await;
    let detail = answer.assert_problem(400, "bad_request");
    assert!(detail.contains("--namespace-transition"), "{detail}");
}

#[tokio::test]
async fn the_transition_needs_the_mesh_identity() {
    let output = serve_command(&cluster().url(), 1, &["--namespace-transition"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--trust-xfcc"), "{stderr}");
}

#[tokio::test]
async fn during_the_transition_workloads_meet_in_the_shared_namespace_and_not_after_it() {
    // docs/threat-model.md: a record made during the transition is in the shared namespace
    // too, where another workload naming the scope reaches it; once the transition is off,
    // a record is its workload's only.
    let url = cluster().url();
    let during = mesh_replica(&url, true).await;
    let after = mesh_replica(&url, false).await;
    for (replica, met) in [(&during, true), (&after, false)] {
        let (scope, fingerprint) = (fresh_digest("two-workloads"), fresh_digest("fp"));
        let won = claim_as(&replica.api, CHECKOUT, &scope, &fingerprint, 0).await;
        let claim_id = won.json["claim_id"].as_str().unwrap().to_owned();
        let finalized = finalize_as(&replica.api, CHECKOUT, &scope, &claim_id).await;
        assert_eq!(finalized.status, 200, "{}", finalized.text);
        let cart = claim_as(&during.api, CART, &scope, &fingerprint, 0).await;
        let expected = if met { "completed" } else { "won" };
        assert_eq!(cart.outcome(), expected, "{}", cart.text);
    }
}
