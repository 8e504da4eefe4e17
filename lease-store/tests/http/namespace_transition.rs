//! Switching an installation to the mesh identity without a double run
//! (`docs/configuration.md#switching-to-the-mesh-identity`): two replicas on one database,
//! one still on the shared namespace (bearer token), one under `--trust-xfcc
//! --namespace-transition`. The same request, sent once through each, runs once whichever
//! side made the record; without `--namespace-transition` it runs again.

#![allow(clippy::unwrap_used)]

use keyflight_lease_store::caller::record_scope;
use keyflight_protocol::Digest;
use serde_json::json;

use crate::mesh_identity::{CART, CHECKOUT, claim_as, post_as, through_the_sidecar};
use crate::support::*;

/// The settings of a replica moved to the mesh identity: CHECKOUT and CART allowed, no
/// bearer token; its `api` calls from its sidecar's address.
async fn mesh_replica(database_url: &str, transition: bool) -> Server {
    let port = keyflight_testkit::process::free_port();
    let mut args = vec!["--trust-xfcc", "--workload", CHECKOUT, "--workload", CART];
    if transition {
        args.push("--namespace-transition");
    }
    let mut command = serve_command(database_url, port, &args);
    command.env_remove("KEYFLIGHT_TOKEN");
    let mut server = start_command(command, port).await;
    server.api = through_the_sidecar(&server);
    server
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

/// A batch's calls reach the records their single routes reach: the caller's own, and
/// during the transition the shared namespace's too (`docs/records.md#batches`).
#[tokio::test]
async fn a_batch_reaches_the_records_its_single_routes_reach() {
    let (shared, moved) = fleet(true).await;
    let (before, before_fp, before_claim) = shared.api.win("batch-before-switch").await;
    let (after, after_fp) = (fresh_digest("batch-after-switch"), fresh_digest("fp"));
    let claim = |scope: &str, fingerprint: &str| {
        let request = json!({ "fingerprint": fingerprint, "lease_ms": 60_000 });
        json!({ "scope": scope, "request": request })
    };
    let mut naming_previous = claim(&fresh_digest("batch-two-transitions"), &after_fp);
    naming_previous["request"]["previous"] =
        json!({ "scope": fresh_digest("old"), "fingerprint": fresh_digest("fp") });
    let calls = [
        claim(&before, &before_fp),
        claim(&after, &after_fp),
        naming_previous,
    ];
    let claims = post_as(
        &moved.api,
        CHECKOUT,
        "/v1/batch/claims",
        &json!({ "calls": calls }),
    )
    .await;
    assert_eq!(claims.status, 200, "{}", claims.text);
    let answers = &claims.json["answers"];
    assert_eq!(
        answers[0]["body"]["outcome"], "in_progress",
        "{}",
        claims.text
    );
    assert_eq!(answers[1]["body"]["outcome"], "won", "{}", claims.text);
    assert_eq!(answers[2]["status"], 400, "{}", claims.text);
    let detail = answers[2]["body"]["detail"].as_str().unwrap();
    assert!(detail.contains("--namespace-transition"), "{detail}");

    // The batch's win holds the caller's own record and the shared namespace's.
    let own = record_scope(CHECKOUT, &Digest::from_hex(&after).unwrap()).to_hex();
    let shown = shared
        .admin
        .get(&format!("/v1/records/{own}"), Some(ADMIN))
        .await;
    assert_eq!(shown.json["state"], "pending", "{}", shown.text);
    let running = shared.api.claim(&after, &after_fp, 0).await;
    assert_eq!(running.outcome(), "in_progress", "{}", running.text);

    let finalize = |scope: &str, claim_id: &str| {
        json!({
            "scope": scope,
            "request": { "claim_id": claim_id, "response": sample_response(), "replayable": true },
        })
    };
    let after_claim = answers[1]["body"]["claim_id"].as_str().unwrap();
    let finalizes = post_as(
        &moved.api,
        CHECKOUT,
        "/v1/batch/finalizes",
        &json!({ "calls": [finalize(&before, &before_claim), finalize(&after, after_claim)] }),
    )
    .await;
    assert_eq!(
        finalizes.json,
        json!({ "answers": [{ "status": 200, "body": null }, { "status": 200, "body": null }] }),
        "{}",
        finalizes.text
    );
    for (scope, fingerprint) in [(&before, &before_fp), (&after, &after_fp)] {
        let replay = shared.api.claim(scope, fingerprint, 0).await;
        assert_eq!(replay.outcome(), "completed", "{}", replay.text);
    }
    let shown = shared
        .admin
        .get(&format!("/v1/records/{own}"), Some(ADMIN))
        .await;
    assert_eq!(shown.json["state"], "completed", "{}", shown.text);
}
