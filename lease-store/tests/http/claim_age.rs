//! `claimed_after_ms` on a `won` answer (`docs/stream-machine.md#the-claim`): the proxy
//! subtracts it from its round trip to bound the lease's age, so it may only count time
//! before the lease started. A reply held back after the claim statement wrote the lease —
//! a COMMIT reply delayed between Postgres and the store — is lease age and must stay in
//! the proxy's bound, on every path a claim can win by: the single statement, a
//! group-commit batch, and a long-poll that ended in a takeover.
//!
//! The hold is made in the database: on its own cluster, a trigger sleeps [`HELD`] after
//! each row of a marked claim (its `retention_s` is [`MARK_S`]) is written, after the
//! statement set the lease from `clock_timestamp()`.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_testkit::pg::PgCluster;
use serde_json::{Value, json};

/// How long the database holds a marked claim's reply after writing its lease.
const HELD: Duration = Duration::from_millis(600);
/// The retention that marks a claim for the hold.
const MARK_S: u64 = 4242;

/// A migrated cluster of its own with the hold installed.
fn holding_cluster() -> PgCluster {
    let cluster = PgCluster::start();
    migrate(&cluster.url());
    cluster.psql(&format!(
        "CREATE FUNCTION hold_reply() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep({held}); RETURN NULL; END $$;
         CREATE TRIGGER hold_reply AFTER INSERT OR UPDATE ON keyflight_records
           FOR EACH ROW WHEN (NEW.retention = interval '{MARK_S} seconds')
           EXECUTE FUNCTION hold_reply();",
        held = HELD.as_secs_f64()
    ));
    cluster
}

/// A claim the hold applies to.
fn marked(fingerprint: &str, lease_ms: u64, wait_ms: u64) -> Value {
    json!({
        "fingerprint": fingerprint,
        "lease_ms": lease_ms,
        "wait_ms": wait_ms,
        "retention_s": MARK_S,
    })
}

/// Sends `claim` on `scope`; returns the answer and the round trip.
async fn timed_claim(api: &Api, scope: &str, claim: &Value) -> (Answer, Duration) {
    let sent = Instant::now();
    let answer = api
        .post(&format!("/v1/claims/{scope}"), Some(TOKEN), claim)
        .await;
    (answer, sent.elapsed())
}

/// The proxy's bound on the lease's age (round trip minus `claimed_after_ms`) covers the
/// reply the database held after the lease started.
fn assert_the_held_reply_counts(answer: &Answer, round_trip: Duration) {
    assert_eq!(answer.outcome(), "won", "{}", answer.text);
    let claimed_after = Duration::from_millis(answer.json["claimed_after_ms"].as_u64().unwrap());
    assert!(
        round_trip.saturating_sub(claimed_after) >= HELD,
        "claimed_after_ms {claimed_after:?} of a {round_trip:?} round trip hides the {HELD:?} \
         the reply was held after the lease started: {}",
        answer.text
    );
}

#[tokio::test]
async fn a_reply_held_after_the_single_claim_statement_counts_as_lease_age() {
    let cluster = holding_cluster();
    let server = start_server_on(&cluster.url(), &["--batch-max", "1"]).await;
    let (answer, round_trip) = timed_claim(
        &server.api,
        &fresh_digest("held-single"),
        &marked(&fresh_digest("fp"), 30_000, 0),
    )
    .await;
    assert_eq!(answer.json["how"], "claimed");
    assert_the_held_reply_counts(&answer, round_trip);
}

#[tokio::test]
async fn a_reply_held_after_a_long_polls_takeover_counts_as_lease_age() {
    let cluster = holding_cluster();
    let server = start_server_on(&cluster.url(), &["--batch-max", "1"]).await;
    let (scope, fingerprint) = (fresh_digest("held-takeover"), fresh_digest("fp"));
    let first = json!({ "fingerprint": fingerprint, "lease_ms": 300, "wait_ms": 0 });
    let (winner, _) = timed_claim(&server.api, &scope, &first).await;
    assert_eq!(winner.outcome(), "won", "{}", winner.text);
    // In progress at first; the long-poll wakes when the 300 ms lease runs out and takes
    // the abandoned lease over with the held statement.
    let (answer, round_trip) =
        timed_claim(&server.api, &scope, &marked(&fingerprint, 30_000, 10_000)).await;
    assert_eq!(answer.json["how"], "recovered_abandoned", "{}", answer.text);
    assert_the_held_reply_counts(&answer, round_trip);
}

#[tokio::test]
async fn a_reply_held_after_a_group_commit_batch_counts_as_lease_age() {
    let cluster = holding_cluster();
    let server = start_server_on(&cluster.url(), &["--batch-workers", "1"]).await;
    // The one claim worker is held; the marked claims made meanwhile queue, and run as one
    // batch once the gate opens.
    let gate = ClaimGate::hold(&server.api, &cluster.url(), "keyflight-lease-store").await;
    let queued: Vec<_> = (0..2)
        .map(|n| {
            let api = server.api.clone();
            let claim = marked(&fresh_digest("fp"), 30_000, 0);
            let scope = fresh_digest(&format!("held-batch-{n}"));
            tokio::spawn(async move { timed_claim(&api, &scope, &claim).await })
        })
        .collect();
    server
        .api
        .wait_counter("keyflight_store_batch_queued{kind=\"claim\"}", 2)
        .await;
    gate.open().await;
    for claim in queued {
        let (answer, round_trip) = claim.await.unwrap();
        assert_eq!(answer.json["how"], "claimed");
        assert_the_held_reply_counts(&answer, round_trip);
    }
}
