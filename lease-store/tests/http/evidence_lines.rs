//! The evidence lines (`lease-store/src/evidence.rs`): a won claim with its fence and how
//! it was won, each renew that extended a lease, and each settle call applied or refused, as JSON lines a history checker
//! parses (`chaos/src/checker/evidence.rs`).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::support::*;
use keyflight_testkit::pg::wait_for_lock_waits;
use keyflight_testkit::process::{eventually, free_port};
use serde_json::{Value, json};

/// The `evidence` events in a JSON log, as their `fields` objects.
fn evidence(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "keyflight_lease_store::evidence")
        .map(|line| line["fields"].clone())
        .collect()
}

#[tokio::test]
async fn claims_and_settles_are_logged_with_fence_how_and_outcome() {
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &["--takeover-grace", "0s"]);
    command.env("KEYFLIGHT_LOG_FORMAT", "json");
    let Server { mut child, api, .. } = start_command(command, port).await;

    // A fresh insert, finalized.
    let (scope, fingerprint, first) = api.win("evidence").await;
    api.finalize(&scope, &first).await;
    // A short lease nobody settles, taken over once it ran out; the old winner's
    // release then finds the lease lost.
    let other = fresh_digest("evidence-abandoned");
    let short = |api: &Api| {
        let other = other.clone();
        let fingerprint = fingerprint.clone();
        let api = api.clone();
        async move {
            api.post(
                &format!("/v1/claims/{other}"),
                Some(TOKEN),
                &json!({ "fingerprint": fingerprint, "lease_ms": 50 }),
            )
            .await
        }
    };
    let abandoned = short(&api).await;
    assert_eq!(abandoned.outcome(), "won", "{}", abandoned.text);
    let taken = loop {
        let answer = short(&api).await;
        if answer.outcome() == "won" {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let late = api
        .post(
            &format!("/v1/claims/{other}/release"),
            Some(TOKEN),
            &json!({ "claim_id": abandoned.json["claim_id"], "as": "unknown" }),
        )
        .await;
    late.assert_problem(409, "lease_lost");

    child.signal(keyflight_testkit::process::Signal::Term);
    child.wait_exit(Duration::from_secs(30));
    let lines = evidence(&child.log());
    let won: Vec<(&str, &str, i64, &str)> = lines
        .iter()
        .filter(|f| f["evidence"] == "claim_won")
        .map(|f| {
            (
                f["scope"].as_str().unwrap(),
                f["how"].as_str().unwrap(),
                f["fence"].as_i64().unwrap(),
                f["fingerprint"].as_str().unwrap(),
            )
        })
        .collect();
    let fence = |answer: &Value| answer["fence"].as_i64().unwrap();
    let bare = |digest: &str| digest.trim_start_matches("sha256:").to_owned();
    let (scope, other, fingerprint) = (bare(&scope), bare(&other), bare(&fingerprint));
    let first_fence = lines
        .iter()
        .find(|f| f["evidence"] == "claim_won" && f["claim_id"] == first.as_str())
        .map(|f| f["fence"].as_i64().unwrap())
        .expect("the first claim is logged with its claim id");
    assert_eq!(
        won,
        vec![
            (scope.as_str(), "claimed", first_fence, fingerprint.as_str()),
            (
                other.as_str(),
                "claimed",
                fence(&abandoned.json),
                fingerprint.as_str()
            ),
            (
                other.as_str(),
                "recovered_abandoned",
                fence(&taken.json),
                fingerprint.as_str()
            ),
        ],
        "log at {}",
        child.log_path().display()
    );
    let settles: Vec<(&str, &str, &str)> = lines
        .iter()
        .filter(|f| f["evidence"] == "settle")
        .map(|f| {
            (
                f["claim_id"].as_str().unwrap(),
                f["call"].as_str().unwrap(),
                f["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        settles,
        vec![
            (first.as_str(), "finalize", "applied"),
            (
                abandoned.json["claim_id"].as_str().unwrap(),
                "release_unknown",
                "lease_lost"
            ),
        ]
    );
}

/// A renew that extended its lease is a fact the judge times the lease's end from; one that
/// found the lease taken over extended nothing and is not logged as renewed.
#[tokio::test]
async fn renews_that_extended_a_lease_are_logged() {
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &["--takeover-grace", "0s"]);
    command.env("KEYFLIGHT_LOG_FORMAT", "json");
    let Server { mut child, api, .. } = start_command(command, port).await;
    let scope = fresh_digest("evidence-renewed");
    let fingerprint = fresh_digest("evidence-renewed-body");
    let path = format!("/v1/claims/{scope}");
    let body = json!({ "fingerprint": fingerprint, "lease_ms": 50 });
    let first = api.post(&path, Some(TOKEN), &body).await;
    assert_eq!(first.outcome(), "won", "{}", first.text);
    let renew_path = format!("{path}/renew");
    let renew = json!({ "claim_id": first.json["claim_id"], "lease_ms": 60 });
    let renewed = api.post(&renew_path, Some(TOKEN), &renew).await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
    let taken = loop {
        let answer = api.post(&path, Some(TOKEN), &body).await;
        if answer.outcome() == "won" {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    api.post(&renew_path, Some(TOKEN), &renew)
        .await
        .assert_problem(409, "lease_lost");

    child.signal(keyflight_testkit::process::Signal::Term);
    child.wait_exit(Duration::from_secs(30));
    let lines = evidence(&child.log());
    let bare = scope.trim_start_matches("sha256:");
    let of_scope: Vec<(&str, &str)> = lines
        .iter()
        .filter(|f| f["scope"] == bare)
        .map(|f| {
            (
                f["evidence"].as_str().unwrap(),
                f["claim_id"].as_str().unwrap(),
            )
        })
        .collect();
    let (first_id, taken_id) = (
        first.json["claim_id"].as_str().unwrap(),
        taken.json["claim_id"].as_str().unwrap(),
    );
    assert_eq!(
        of_scope,
        vec![
            ("claim_won", first_id),
            ("renewed", first_id),
            ("claim_won", taken_id),
        ],
        "log at {}",
        child.log_path().display()
    );
    let line = lines
        .iter()
        .find(|f| f["evidence"] == "renewed")
        .expect("the renew is logged");
    assert_eq!(line["lease_ms"], 60);
}

/// A hold policy's lapsed lease held as `unknown` is a fact the judge needs (the answer
/// its caller had may no longer replay), and its claim says it was at-most-once.
#[tokio::test]
async fn an_at_most_once_claim_and_its_held_lapse_are_logged() {
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &["--takeover-grace", "0s"]);
    command.env("KEYFLIGHT_LOG_FORMAT", "json");
    let Server { mut child, api, .. } = start_command(command, port).await;
    let scope = fresh_digest("evidence-held");
    let fingerprint = fresh_digest("evidence-held-body");
    let path = format!("/v1/claims/{scope}");
    let body = json!({ "fingerprint": fingerprint, "lease_ms": 50, "at_most_once": true });
    let claim = || api.post(&path, Some(TOKEN), &body);
    let won = claim().await;
    assert_eq!(won.outcome(), "won", "{}", won.text);
    let held = loop {
        let answer = claim().await;
        if answer.outcome() != "in_progress" {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(held.outcome(), "unknown", "{}", held.text);

    child.signal(keyflight_testkit::process::Signal::Term);
    child.wait_exit(Duration::from_secs(30));
    let lines = evidence(&child.log());
    let bare = scope.trim_start_matches("sha256:");
    let of_scope: Vec<&Value> = lines.iter().filter(|f| f["scope"] == bare).collect();
    assert_eq!(of_scope.len(), 2, "log at {}", child.log_path().display());
    assert_eq!(of_scope[0]["evidence"], "claim_won");
    assert_eq!(of_scope[0]["at_most_once"], true);
    assert_eq!(of_scope[1]["evidence"], "lapse_held");
    assert_eq!(of_scope[1]["fence"], won.json["fence"]);
}

/// An operator's erase and resolve are facts about a record a judge must see (a re-run
/// after an erase, a replay after a resolve), logged once each change committed.
#[tokio::test]
async fn operator_erases_and_resolves_are_logged_as_evidence() {
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &[]);
    command.env("KEYFLIGHT_LOG_FORMAT", "json");
    let Server {
        mut child,
        api,
        admin,
    } = start_command(command, port).await;

    let (erased, _, claim_id) = api.win("evidence-erase").await;
    api.finalize(&erased, &claim_id).await;
    let answer = admin
        .send(
            reqwest::Method::DELETE,
            &format!("/v1/records/{erased}?reason=INC-9"),
            Some(ADMIN),
            |r| r.header("keyflight-ack-replay-risk", "true"),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let (resolved, _, claim_id) = api.win("evidence-resolve").await;
    api.post(
        &format!("/v1/claims/{resolved}/release"),
        Some(TOKEN),
        &json!({ "claim_id": claim_id, "as": "unknown" }),
    )
    .await;
    let answer = admin
        .post(
            &format!("/v1/records/{resolved}/resolve"),
            Some(ADMIN),
            &json!({ "as": "completed", "response": sample_response(), "reason": "INC-9" }),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);

    child.signal(keyflight_testkit::process::Signal::Term);
    child.wait_exit(Duration::from_secs(30));
    let changes: Vec<(String, String, String)> = evidence(&child.log())
        .iter()
        .filter(|f| f["evidence"] == "operator")
        .map(|f| {
            let text = |name: &str| f[name].as_str().unwrap_or_default().to_owned();
            (text("scope"), text("action"), text("operator"))
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            (erased, "erase".into(), "admin".into()),
            (resolved, "resolve_completed".into(), "admin".into()),
        ],
        "log at {}",
        child.log_path().display()
    );
}

/// A settle that commits after its caller hung up (a store frozen mid-call, a row lock held
/// past the caller's timeout) is a fact about the record all the same: the judge times a
/// release's cooldown from its line, so it is logged once the statement commits.
#[tokio::test]
async fn a_settle_whose_caller_hung_up_is_logged_once_it_commits() {
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &[]);
    command.env("KEYFLIGHT_LOG_FORMAT", "json");
    let Server { child, api, .. } = start_command(command, port).await;
    let (scope, _, claim_id) = api.win("evidence-hung-up").await;
    let (db, connection) = tokio_postgres::connect(&cluster().url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let row = keyflight_protocol::Digest::from_hex(&scope)
        .unwrap()
        .0
        .to_vec();
    db.batch_execute("BEGIN").await.unwrap();
    db.execute(
        "SELECT 1 FROM keyflight_records WHERE scope = $1 FOR UPDATE",
        &[&row],
    )
    .await
    .unwrap();
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(format!("{}/v1/claims/{scope}/release", api.base))
        .bearer_auth(TOKEN)
        .json(&json!({ "claim_id": claim_id, "as": "cooldown", "cooldown_ms": 60_000 }))
        .send()
        .await;
    assert!(gave_up.is_err(), "the caller hung up: {gave_up:?}");
    db.batch_execute("COMMIT").await.unwrap();
    keyflight_testkit::process::eventually(
        "the release committed",
        Duration::from_secs(10),
        || async {
            db.query_one(
                "SELECT state FROM keyflight_records WHERE scope = $1",
                &[&row],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
                == "failed"
        },
    )
    .await;
    keyflight_testkit::process::eventually(
        "the committed release is logged",
        Duration::from_secs(10),
        || async {
            evidence(&child.log()).iter().any(|f| {
                f["evidence"] == "settle"
                    && f["claim_id"] == claim_id.as_str()
                    && f["call"] == "release_cooldown"
                    && f["outcome"] == "applied"
            })
        },
    )
    .await;
}

/// A takeover whose caller went away while the statement ran is an orphan: the store still
/// reads the statement to the end, logs the claim won (how it won is what a judge follows the
/// record by), then releases it (`release_orphan`), giving the record back: it stays the
/// request's, so another body is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_whose_caller_left_is_logged_won_then_released_as_an_orphan() {
    let app = format!("orphan-evidence-{}", uuid::Uuid::now_v7().simple());
    let url = format!("{}?application_name={app}", cluster().url());
    let port = free_port();
    let mut command = serve_command(&url, port, &["--takeover-grace", "0s"]);
    command.env("KEYFLIGHT_LOG_FORMAT", "json");
    let Server { mut child, api, .. } = start_command(command, port).await;
    let scope = fresh_digest("evidence-orphan");
    let fingerprint = fresh_digest("evidence-orphan-body");
    let bare = scope.trim_start_matches("sha256:").to_owned();
    let path = format!("/v1/claims/{scope}");
    let body = json!({ "fingerprint": fingerprint, "lease_ms": 1 });
    let first = api.post(&path, Some(TOKEN), &body).await;
    assert_eq!(first.outcome(), "won", "{}", first.text);

    // Hold the record's row once its 1 ms lease ran out: the takeover's UPDATE waits on it.
    let gate = db_client(&cluster().url()).await;
    let expired = format!(
        "SELECT lease_expires_at < clock_timestamp() FROM keyflight_records
          WHERE scope = decode('{bare}', 'hex')"
    );
    eventually(
        "the first lease runs out",
        Duration::from_secs(10),
        || async {
            gate.query_one(&expired, &[])
                .await
                .unwrap()
                .get::<_, bool>(0)
        },
    )
    .await;
    gate.batch_execute(&format!(
        "BEGIN; SELECT 1 FROM keyflight_records WHERE scope = decode('{bare}', 'hex') FOR UPDATE"
    ))
    .await
    .unwrap();
    let caller = OpenCall::post(port, &path, &body).await;
    let watcher = db_client(&cluster().url()).await;
    wait_for_lock_waits(&watcher, &app, 1).await;
    // The proxy's call is gone (it was killed): the connection closes mid-statement.
    caller.hang_up().await;
    gate.batch_execute("ROLLBACK").await.unwrap();
    let given_back =
        format!("SELECT state FROM keyflight_records WHERE scope = decode('{bare}', 'hex')");
    eventually(
        "the orphan is released",
        Duration::from_secs(15),
        || async {
            watcher
                .query_opt(&given_back, &[])
                .await
                .unwrap()
                .is_none_or(|row| row.get::<_, String>(0) == "failed")
        },
    )
    .await;
    let another = json!({ "fingerprint": fresh_digest("evidence-orphan-other"), "lease_ms": 1 });
    let refused = api.post(&path, Some(TOKEN), &another).await;
    assert_eq!(refused.outcome(), "conflict", "{}", refused.text);

    child.signal(keyflight_testkit::process::Signal::Term);
    child.wait_exit(Duration::from_secs(30));
    let lines = evidence(&child.log());
    let of_scope: Vec<(&str, &str)> = lines
        .iter()
        .filter(|f| f["scope"] == bare.as_str())
        .map(|f| {
            let what = match f["evidence"].as_str().unwrap() {
                "claim_won" => f["how"].as_str().unwrap(),
                _ => f["call"].as_str().unwrap(),
            };
            (f["evidence"].as_str().unwrap(), what)
        })
        .collect();
    assert_eq!(
        of_scope,
        vec![
            ("claim_won", "claimed"),
            ("claim_won", "recovered_abandoned"),
            ("settle", "release_orphan"),
        ],
        "log at {}",
        child.log_path().display()
    );
    let mine: Vec<&Value> = lines
        .iter()
        .filter(|f| f["scope"] == bare.as_str())
        .collect();
    let (taken, released) = (mine[1], mine[2]);
    assert_eq!(released["claim_id"], taken["claim_id"]);
    assert_eq!(released["fence"], taken["fence"]);
    assert_eq!(released["outcome"], "applied");
    assert_eq!(released["leaves"], "failed");
}
