//! `POST /v1/batch/claims` and `POST /v1/batch/finalizes` (`docs/records.md#batches`): each
//! call answered exactly as its single route answers it, in order; the calls of one batch
//! landing as one group-commit statement; and the refusals of a whole batch.

#![allow(clippy::unwrap_used)]

use keyflight_protocol::wire::batch::{MAX_BATCH_CALLS, OwnedBatchAnswer};
use keyflight_protocol::wire::{ClaimAnswer, ClaimResponse, WonHow};
use serde_json::{Value, json};

use crate::support::*;

const CLAIMS: &str = "/v1/batch/claims";
const FINALIZES: &str = "/v1/batch/finalizes";

/// One claim of a batch: `request` on `scope`.
fn claim_call(scope: &str, request: Value) -> Value {
    json!({ "scope": scope, "request": request })
}

/// One finalize of a batch, recording `response` under `claim_id`.
fn finalize_call(scope: &str, claim_id: &str, response: &Value) -> Value {
    json!({
        "scope": scope,
        "request": { "claim_id": claim_id, "response": response, "replayable": true },
    })
}

/// A claim's body as [`Api::claim`] sends it, without a wait.
fn claim_body(fingerprint: &str) -> Value {
    json!({ "fingerprint": fingerprint, "lease_ms": 60_000 })
}

/// POSTs a batch of `calls` to `path` with the filter token; asserts the batch's 200 and an
/// answer per call, and returns each call's `(status, body)`, in order.
async fn batch(api: &Api, path: &str, calls: &[Value]) -> Vec<(u16, Value)> {
    let answer = api
        .post(path, Some(TOKEN), &json!({ "calls": calls }))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        answer
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json"),
        "{}",
        answer.text
    );
    let parsed: OwnedBatchAnswer = serde_json::from_str(&answer.text).unwrap();
    assert_eq!(parsed.answers.len(), calls.len(), "{}", answer.text);
    parsed
        .answers
        .into_iter()
        .map(|a| (a.status, serde_json::from_str(a.body.get()).unwrap()))
        .collect()
}

/// A sample of `/metrics` (histogram sums are not integers; 0 when absent).
async fn sample(api: &Api, series: &str) -> f64 {
    let metrics = api.get("/metrics", None).await;
    metrics
        .text
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The fence of the record of `scope`, read through the admin API.
async fn record_fence(server: &Server, scope: &str) -> Value {
    let record = server
        .admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    assert_eq!(record.status, 200, "{}", record.text);
    record.json["fence"].clone()
}

/// Whether the record of `scope` exists.
async fn has_record(server: &Server, scope: &str) -> bool {
    let record = server
        .admin
        .get(&format!("/v1/records/{scope}"), Some(ADMIN))
        .await;
    assert!(matches!(record.status, 200 | 404), "{}", record.text);
    record.status == 200
}

#[tokio::test]
async fn a_batch_of_claims_on_fresh_scopes_wins_each_in_order_with_one_statement() {
    let app = format!("batch-http-{}", std::process::id());
    let url = format!("{}?application_name={app}", cluster().url());
    let server = start_server_on(&url, &["--batch-workers", "1"]).await;
    // The worker is held, so the batch's claims all queue before it takes them: the batch
    // then lands as one statement whatever the scheduling.
    let gate = ClaimGate::hold(&server.api, &url, &app).await;
    let scopes: Vec<String> = (0..8)
        .map(|n| fresh_digest(&format!("batch-{n}")))
        .collect();
    let calls: Vec<Value> = scopes
        .iter()
        .map(|scope| claim_call(scope, claim_body(&fresh_digest("fp"))))
        .collect();
    let sent = tokio::spawn({
        let api = server.api.clone();
        async move { batch(&api, CLAIMS, &calls).await }
    });
    server
        .api
        .wait_counter("keyflight_store_batch_queued{kind=\"claim\"}", 8)
        .await;
    gate.open().await;
    let answers = sent.await.unwrap();

    let mut fences = Vec::new();
    for (scope, (status, body)) in scopes.iter().zip(answers) {
        assert_eq!(status, 200, "{body}");
        let answer: ClaimAnswer = serde_json::from_value(body.clone()).unwrap();
        let ClaimResponse::Won {
            fence,
            how: WonHow::Claimed,
            ..
        } = answer.response
        else {
            panic!("a fresh scope is won: {body}");
        };
        // In order: the answer at each place is the claim of that place's scope.
        assert_eq!(record_fence(&server, scope).await, fence, "{body}");
        fences.push(fence);
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 8, "each claim has a fence of its own");

    // Two claim statements in all: the gated claim alone, then the batch's eight together.
    let (batches, calls) = (
        sample(
            &server.api,
            "keyflight_store_batch_size_count{kind=\"claim\"}",
        )
        .await,
        sample(
            &server.api,
            "keyflight_store_batch_size_sum{kind=\"claim\"}",
        )
        .await,
    );
    assert_eq!((batches, calls), (2.0, 9.0));
    assert_eq!(
        server
            .api
            .counter("keyflight_store_events_total{event=\"claimed\"}")
            .await,
        9
    );
    assert_eq!(
        sample(
            &server.api,
            "keyflight_store_request_duration_seconds_count{route=\"/v1/batch/claims\"}"
        )
        .await,
        1.0
    );
}

#[tokio::test]
async fn each_claim_of_a_batch_is_answered_as_the_single_route_answers_it() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let (completed, completed_fp, completed_claim) = api.win("batch-completed").await;
    let recorded = api.finalize(&completed, &completed_claim).await;
    let (running, _, _) = api.win("batch-running").await;
    let (fresh, too_short, waiting) = (
        fresh_digest("batch-fresh"),
        fresh_digest("batch-lease-0"),
        fresh_digest("batch-wait"),
    );
    let fp = fresh_digest("fp");
    let short_body = json!({ "fingerprint": fp, "lease_ms": 0 });
    let answers = batch(
        api,
        CLAIMS,
        &[
            claim_call(&fresh, claim_body(&fp)),
            claim_call(&too_short, short_body.clone()),
            claim_call(
                &waiting,
                json!({ "fingerprint": fp, "lease_ms": 60_000, "wait_ms": 500 }),
            ),
            claim_call(&completed, claim_body(&completed_fp)),
            claim_call(&running, claim_body(&fresh_digest("other"))),
        ],
    )
    .await;

    let (status, won) = &answers[0];
    assert_eq!(
        (*status, won["outcome"].as_str()),
        (200, Some("won")),
        "{won}"
    );
    assert_eq!(record_fence(&server, &fresh).await, won["fence"]);

    // A value out of range: the single route's problem, word for word, and nothing claimed.
    let single = api
        .post(
            &format!("/v1/claims/{}", fresh_digest("twin")),
            Some(TOKEN),
            &short_body,
        )
        .await;
    single.assert_problem(400, "bad_request");
    assert_eq!(answers[1], (400, single.json));
    assert!(!has_record(&server, &too_short).await);

    // A claim that would wait: refused in the batch (the single route would long-poll).
    let (status, refused) = &answers[2];
    assert_eq!(*status, 400, "{refused}");
    assert_eq!(refused["code"], "bad_request");
    assert_eq!(refused["status"], 400);
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("a batch never waits"),
        "{refused}"
    );
    assert!(!has_record(&server, &waiting).await);

    // A settled record is replayed as the single route replays it.
    let single = api.claim(&completed, &completed_fp, 0).await;
    assert_eq!(single.outcome(), "completed");
    let (status, replay) = &answers[3];
    assert_eq!(*status, 200, "{replay}");
    assert_eq!(replay["outcome"], "completed");
    assert_eq!(replay["response"], recorded);
    assert_eq!(replay["response"], single.json["response"]);
    assert!(
        replay["record_expires_in_ms"].as_u64().is_some(),
        "{replay}"
    );

    // Another body under a running request's key: the same conflict.
    let single = api.claim(&running, &fresh_digest("other"), 0).await;
    assert_eq!(single.outcome(), "conflict");
    assert_eq!(answers[4], (200, single.json));

    // The batch's two refusals count as the problems they are, beside the single route's one.
    assert_eq!(
        api.counter("keyflight_store_errors_total{code=\"bad_request\"}")
            .await,
        3
    );
}

#[tokio::test]
async fn each_finalize_of_a_batch_is_answered_as_the_single_route_answers_it() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let mut won = Vec::new();
    for label in ["first", "lost", "unrecordable", "last"] {
        won.push(api.win(&format!("batch-finalize-{label}")).await);
    }
    let response = sample_response();
    let unrecordable = json!({
        "status": 200,
        "headers": [["authorization", "Bearer never-stored"]],
        "body_b64": "",
    });
    let wrong_claim = "0190f5a0-0000-7000-8000-000000000000";
    let calls = [
        finalize_call(&won[0].0, &won[0].2, &response),
        finalize_call(&won[1].0, wrong_claim, &response),
        finalize_call(&won[2].0, &won[2].2, &unrecordable),
        finalize_call(&won[3].0, &won[3].2, &response),
    ];
    let answers = batch(api, FINALIZES, &calls).await;

    let lost = api.try_finalize(&won[1].0, wrong_claim, &response).await;
    lost.assert_problem(409, "lease_lost");
    let refused = api.try_finalize(&won[2].0, &won[2].2, &unrecordable).await;
    refused.assert_problem(400, "bad_request");
    assert_eq!(
        answers,
        [
            (200, Value::Null),
            (409, lost.json),
            (400, refused.json),
            (200, Value::Null),
        ]
    );

    // The two that landed replay; the other two are still running.
    for (n, outcome) in [
        (0, "completed"),
        (1, "in_progress"),
        (2, "in_progress"),
        (3, "completed"),
    ] {
        let (scope, fingerprint, _) = &won[n];
        let claim = api.claim(scope, fingerprint, 0).await;
        assert_eq!(claim.outcome(), outcome, "call {n}: {}", claim.text);
        if outcome == "completed" {
            assert_eq!(claim.json["response"], response);
        }
    }
    // A repeat of the batch: a finalize that landed is a success again.
    let repeated = batch(api, FINALIZES, &calls).await;
    assert_eq!(repeated[0], (200, Value::Null));
    assert_eq!(repeated[3], (200, Value::Null));
    assert_eq!(repeated[1].0, 409);
    // Counted as the single route counts: two landed twice, a lost lease per 409.
    let events = |event: &str| format!("keyflight_store_events_total{{event=\"{event}\"}}");
    assert_eq!(api.counter(&events("finalize")).await, 4);
    assert_eq!(api.counter(&events("lease_lost")).await, 3);
}

#[tokio::test]
async fn a_malformed_empty_or_oversized_batch_is_refused_whole() {
    // 65 claims fit in 32 KiB; the body limit is the whole batch's.
    let server = start_server(&["--max-body-bytes", "32768"]).await;
    let api = &server.api;
    let call = |label: &str| claim_call(&fresh_digest(label), claim_body(&fresh_digest("fp")));
    let too_many: Vec<Value> = (0..=MAX_BATCH_CALLS).map(|_| call("too-many")).collect();
    let one = [call("one")];
    let mut extra = call("extra");
    extra["extra"] = json!(1);
    let bad_scope = claim_call("ABC", claim_body(&fresh_digest("fp")));
    for (what, path, body) in [
        ("no calls", CLAIMS, json!({ "calls": [] })),
        ("no calls", FINALIZES, json!({ "calls": [] })),
        ("65 calls", CLAIMS, json!({ "calls": too_many })),
        (
            "unknown field",
            CLAIMS,
            json!({ "calls": one, "wait": true }),
        ),
        (
            "unknown field in a call",
            CLAIMS,
            json!({ "calls": [extra] }),
        ),
        ("bad scope", CLAIMS, json!({ "calls": [bad_scope] })),
        (
            "claims sent as finalizes",
            FINALIZES,
            json!({ "calls": one }),
        ),
    ] {
        let answer = api.post(path, Some(TOKEN), &body).await;
        assert_eq!(answer.status, 400, "{what}: {}", answer.text);
        answer.assert_problem(400, "bad_request");
    }
    let malformed = api.post_raw(CLAIMS, "{\"calls\": [").await;
    malformed.assert_problem(400, "bad_request");
    let big = json!({ "status": 200, "headers": [], "body_b64": "A".repeat(32_768) });
    let (scope, _, claim_id) = api.win("batch-too-big").await;
    // A client of its own: the store may close the connection it refused a body on, and a
    // pooled connection that closes under the next request would fail that request.
    Api::new(api.base.clone())
        .post(
            FINALIZES,
            Some(TOKEN),
            &json!({ "calls": [finalize_call(&scope, &claim_id, &big)] }),
        )
        .await
        .assert_problem(413, "payload_too_large");
    assert_eq!(
        api.counter("keyflight_store_claims_total{outcome=\"won\"}")
            .await,
        1,
        "no call of a refused batch ran, only the single claim"
    );
    assert_eq!(
        api.counter("keyflight_store_events_total{event=\"finalize\"}")
            .await,
        0
    );
}

#[tokio::test]
async fn a_batch_needs_the_credential_the_single_route_needs() {
    let server = start_server(&[]).await;
    let api = &server.api;
    let scope = fresh_digest("batch-auth");
    let body = claim_body(&fresh_digest("fp"));
    let batch_body = json!({ "calls": [claim_call(&scope, body.clone())] });
    for (token, status, code) in [
        (None, 401, "unauthorized"),
        (Some("wrong-token"), 401, "unauthorized"),
        (Some(ADMIN), 403, "forbidden"),
    ] {
        let single = api.post(&format!("/v1/claims/{scope}"), token, &body).await;
        single.assert_problem(status, code);
        for path in [CLAIMS, FINALIZES] {
            let batched = api.post(path, token, &batch_body).await;
            batched.assert_problem(status, code);
            assert_eq!(batched.json, single.json, "{path}");
            assert_eq!(
                batched.headers.get("www-authenticate"),
                single.headers.get("www-authenticate")
            );
        }
    }
    assert!(!has_record(&server, &scope).await);
}
