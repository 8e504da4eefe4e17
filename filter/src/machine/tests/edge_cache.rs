//! F9: the edge replay cache — a hit replays without the store, only what
//! the store acknowledged is cached, and only under a recent operator epoch.

use keyflight_protocol::wire::StoredResponse;

use super::*;
use crate::edge_cache::{self, Entry, slot_key};
use crate::metrics::Outcome;

/// An encoded slot holding a 201 for `scope` and `fingerprint`.
fn slot_for(scope: Digest, fingerprint: Digest, stored_at_ms: u64) -> Vec<u8> {
    Entry {
        scope,
        fingerprint,
        epoch: EPOCH,
        expires_at_ms: stored_at_ms + 60_000,
        response: StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("set-cookie".into(), "leaked=1".into()),
            ],
            body: br#"{"payment_id":"p-1"}"#.to_vec(),
        },
    }
    .encode_at(stored_at_ms)
    .unwrap()
}

/// A stream whose cache slot for `scope` holds `slot`.
fn with_slot(config: &Rc<Config>, scope: &Digest, slot: Option<Vec<u8>>) -> Harness {
    let s = Harness::new(Rc::clone(config));
    filled(s, scope, slot)
}

/// `s` with its cache slot for `scope` holding `slot`.
fn filled(mut s: Harness, scope: &Digest, slot: Option<Vec<u8>>) -> Harness {
    let slots = s.worker.config.edge_cache.unwrap().slots;
    if let Some(slot) = slot {
        s.host.shared.insert(slot_key(scope, slots), slot);
    }
    s
}

#[test]
fn an_edge_cache_hit_replays_without_a_store_call() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let body = br#"{"amount": 10}"#;
    let (scope, fingerprint) = claim_of(Rc::clone(&config), body);
    let mut s = with_slot(
        &config,
        &scope,
        Some(slot_for(scope, fingerprint, NOW_MS - 1_000)),
    );
    s.headers(keyed(), false);
    let out = s.body(body);
    assert_eq!(
        out.get(1),
        Some(&Action::ReadEdgeCache {
            key: slot_key(&scope, config.edge_cache.unwrap().slots)
        })
    );
    assert!(calls(&out).is_empty(), "no lease-store call: {out:?}");
    assert_eq!(
        counts(&out),
        vec![Metric::Outcome(Outcome::ReplayEdgeCache)]
    );
    let r = reply(&out);
    assert_eq!(r.status, 201);
    assert_eq!(r.body, br#"{"payment_id":"p-1"}"#);
    assert_eq!(header(r, "idempotent-replayed"), Some("true"));
    assert_eq!(header(r, "set-cookie"), None, "the allowlist applies again");
    assert_eq!(out.last(), Some(&Action::PauseRequest));
    // The local reply's own response callbacks pass through, without a read
    // of the head: the hot replay path makes no host read it does not need.
    assert_eq!(
        s.response(Callback::ResponseHeaders {
            end_of_stream: false
        }),
        vec![Action::ContinueResponse]
    );
    assert_eq!(s.host.head_reads, 0);
}

#[test]
fn an_edge_cache_record_with_another_fingerprint_is_a_conflict() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let (scope, _) = claim_of(Rc::clone(&config), b"{}");
    let mut s = with_slot(
        &config,
        &scope,
        Some(slot_for(scope, Digest([9; 32]), NOW_MS)),
    );
    s.headers(keyed(), false);
    let out = s.body(br#"{"amount": 99}"#);
    assert!(calls(&out).is_empty());
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Conflict)]);
    assert_eq!(reply(&out).status, 409);
    assert_eq!(code(reply(&out)), "idempotency_conflict");
}

#[test]
fn an_edge_cache_conflict_answers_with_the_policys_mismatch_status() {
    let config = cached(
        serde_json::json!({}),
        serde_json::json!({"mismatch_status": 422}),
    );
    let (scope, _) = claim_of(Rc::clone(&config), b"{}");
    let mut s = with_slot(
        &config,
        &scope,
        Some(slot_for(scope, Digest([9; 32]), NOW_MS)),
    );
    s.headers(keyed(), false);
    let out = s.body(br#"{"amount": 99}"#);
    assert!(calls(&out).is_empty());
    assert_eq!(reply(&out).status, 422);
    assert_eq!(code(reply(&out)), "idempotency_conflict");
}

#[test]
fn expired_foreign_or_colliding_slots_claim_as_usual() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let body = b"{}";
    let (scope, fingerprint) = claim_of(Rc::clone(&config), body);
    let mut other_scope = scope;
    other_scope.0[31] ^= 1;
    for slot in [
        Some(slot_for(scope, fingerprint, NOW_MS - 60_000)),
        Some(slot_for(other_scope, fingerprint, NOW_MS)),
        Some(slot_for(other_scope, Digest([9; 32]), NOW_MS)),
        Some(b"garbage".to_vec()),
        None,
    ] {
        let mut s = with_slot(&config, &scope, slot);
        s.headers(keyed(), false);
        let out = s.body(body);
        assert_eq!(calls(&out).len(), 1, "{out:?}");
        assert!(counts(&out).is_empty());
        assert_eq!(out.last(), Some(&Action::PauseRequest));
    }
}

#[test]
fn a_durable_record_fills_the_edge_cache_and_nothing_else_does() {
    let config = cached(
        serde_json::json!({}),
        serde_json::json!({"retention_s": 5, "lease_ms": 5000}),
    );
    let (scope, _) = claim_of(Rc::clone(&config), b"{}");
    let key = slot_key(&scope, config.edge_cache.unwrap().slots);
    // The winner: cached only once the store acknowledged the record.
    let mut s = Harness::new(Rc::clone(&config));
    s.drive_to_claim(b"{}");
    s.claim_answer(&won(3));
    let out = s.respond(201, true);
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
    let out = s.ack();
    let written = out
        .iter()
        .find_map(|a| match a {
            Action::WriteEdgeCache { key: k, entry } => Some((k.clone(), entry.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(written.0, key);
    assert_eq!(
        written.1.expires_at_ms,
        NOW_MS + 5000,
        "TTL capped by retention"
    );
    assert_eq!(written.1.response.status, 201);
    assert!(
        written
            .1
            .response
            .headers
            .iter()
            .all(|(n, _)| n != "set-cookie")
    );
    // …and the next same request on this worker replays from it.
    let mut next = s.next_stream();
    next.headers(keyed(), false);
    let out = next.body(b"{}");
    assert_eq!(
        counts(&out),
        vec![Metric::Outcome(Outcome::ReplayEdgeCache)]
    );
    // A failed or stolen finalize: nothing.
    for answer in [CallError::LeaseLost, CallError::NoAnswer] {
        let mut s = Harness::new(Rc::clone(&config));
        s.drive_to_claim(b"{}");
        s.claim_answer(&won(3));
        s.respond(201, true);
        let out = s.fail(answer);
        assert!(
            !out.iter()
                .any(|a| matches!(a, Action::WriteEdgeCache { .. })),
            "{out:?}"
        );
    }
    // A follower's completed answer: cached and replayed.
    let mut s = Harness::new(Rc::clone(&config));
    s.drive_to_claim(b"{}");
    let out = s.replay_answer(StoredResponse::new(201, vec![], b"{}"), Some(60_000));
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Replay)]);
}

#[test]
fn an_entry_over_max_entry_bytes_is_not_cached() {
    let mut s = Harness::new(cached(serde_json::json!({}), serde_json::json!({})));
    s.drive_to_claim(b"{}");
    let out = s.replay_answer(
        StoredResponse::new(201, vec![], &[b'x'; 5000]),
        Some(60_000),
    );
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
    assert_eq!(reply(&out).body.len(), 5000, "still replayed");
}

#[test]
fn a_policy_can_opt_out_of_the_edge_cache() {
    let mut s = Harness::new(cached(
        serde_json::json!({}),
        serde_json::json!({"edge_cache": false}),
    ));
    s.headers(keyed(), false);
    let out = s.body(b"{}");
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::ReadEdgeCache { .. })),
        "{out:?}"
    );
    assert!(matches!(calls(&out).as_slice(), [StoreCall::Claim { .. }]));
}

#[test]
fn without_a_recent_operator_epoch_the_edge_cache_is_not_used() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let body = br#"{"amount": 10}"#;
    let (scope, fingerprint) = claim_of(Rc::clone(&config), body);
    // A matching entry, but the worker has had no word on erasures for
    // longer than max_staleness_ms (3 s by default): claim.
    let mut s = with_slot(&config, &scope, Some(slot_for(scope, fingerprint, NOW_MS)));
    s.host.now_ms = NOW_MS + 3_000;
    s.headers(keyed(), false);
    let out = s.body(body);
    assert_eq!(calls(&out).len(), 1, "{out:?}");
    // …and what the claim returns is not cached either.
    let out = s.replay_answer(StoredResponse::new(201, vec![], b"{}"), Some(60_000));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. })),
        "{out:?}"
    );
    // An entry from an older epoch is a miss too…
    let mut s = filled(
        Harness::hearing(Rc::clone(&config), EPOCH + 1),
        &scope,
        Some(slot_for(scope, fingerprint, NOW_MS)),
    );
    s.headers(keyed(), false);
    let out = s.body(body);
    assert_eq!(calls(&out).len(), 1, "{out:?}");
    // …and what it writes carries the epoch it read under.
    let out = s.replay_answer(StoredResponse::new(201, vec![], b"{}"), Some(60_000));
    let written = out.iter().find_map(|a| match a {
        Action::WriteEdgeCache { entry, .. } => Some(entry.epoch),
        _ => None,
    });
    assert_eq!(written, Some(EPOCH + 1));
}

/// When the entry `out` writes stops being served, if it writes one.
fn written_expiry(out: &[Action], now_ms: u64) -> Option<u64> {
    out.iter().find_map(|a| match a {
        Action::WriteEdgeCache { entry, .. } => {
            Some(edge_cache::decode(&entry.encode_at(now_ms)?)?.expires_at_ms)
        }
        _ => None,
    })
}

#[test]
fn a_replay_is_cached_no_longer_than_its_record_lives() {
    // Hole 4 of issue 19: the entry's lifetime counted from when it was
    // cached, so a record with little retention left was replayed at the edge
    // after the store had deleted or reused it.
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let mut s = Harness::new(Rc::clone(&config));
    s.drive_to_claim(b"{}");
    let read_at = s.host.now_ms;
    s.host.now_ms += 300;
    let out = s.replay_answer(StoredResponse::new(201, vec![], b"{}"), Some(2000));
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Replay)]);
    assert_eq!(
        written_expiry(&out, s.host.now_ms),
        Some(read_at + 2000),
        "counted from before the store read the record, not from the write"
    );
    // A record with more retention left than the TTL: the TTL bounds it.
    let mut s = Harness::new(Rc::clone(&config));
    s.drive_to_claim(b"{}");
    let read_at = s.host.now_ms;
    let out = s.replay_answer(StoredResponse::new(201, vec![], b"{}"), Some(86_400_000));
    assert_eq!(written_expiry(&out, s.host.now_ms), Some(read_at + 60_000));
}

#[test]
fn a_replay_from_a_store_that_does_not_say_when_its_record_expires_is_not_cached() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let mut s = Harness::new(config);
    s.drive_to_claim(b"{}");
    let out = s.replay_answer(StoredResponse::new(201, vec![], b"{}"), None);
    assert_eq!(
        counts(&out),
        vec![Metric::Outcome(Outcome::Replay)],
        "still replayed"
    );
    assert_eq!(written_expiry(&out, s.host.now_ms), None);
}

#[test]
fn the_winners_record_is_cached_no_longer_than_its_retention_from_the_claim() {
    // The store counts a record's retention from its claim; an upstream that
    // ran 4 s of a 5 s retention leaves 1 s to serve it.
    let config = cached(
        serde_json::json!({}),
        serde_json::json!({"retention_s": 5, "lease_ms": 5000}),
    );
    let mut s = Harness::new(config);
    s.drive_to_claim(b"{}");
    let read_at = s.host.now_ms;
    s.claim_answer(&won(3));
    s.host.now_ms += 4000;
    s.respond(201, true);
    let out = s.ack();
    assert_eq!(written_expiry(&out, s.host.now_ms), Some(read_at + 5000));
}
