use super::clock::{rfc3339_unix_ms, unix_ms};
use super::read::proxy_settle;
use super::*;

#[test]
fn wall_clock_stamps_become_unix_milliseconds() {
    assert_eq!(unix_ms("1970-01-01", "00:00:00.000"), Some(0));
    assert_eq!(
        rfc3339_unix_ms("2026-12-01T16:36:44.123456Z"),
        Some(1_796_143_004_123)
    );
    assert_eq!(unix_ms("2024-02-29", "23:59:59.9"), Some(1_709_251_199_900));
}

#[test]
fn the_previous_releases_hand_off_line_is_a_hand_off() {
    let line = |said: &str| {
        format!(
            "[2026-12-01 16:36:44.250][24270][warning][wasm] [source/extensions/common/\
             wasm/context.cc:1154] wasm log keyflight keyflight keyflight: keyflight: {said}"
        )
    };
    let handed_off = line(
        "scope 91ab fence 2643: finalize failed: answered with HTTP 503; delivering the \
         response, the outbox keeps the lease and retries",
    );
    let evidence = Evidence::read(&[], &[String::new(), handed_off], 1_796_143_004_000);
    assert_eq!(
        evidence.proxy_settles,
        vec![ProxySettle {
            at_ms: 250,
            envoy: 1,
            event: "handoff".into(),
            scope: "91ab".into(),
            fence: 2643,
            call: "finalize".into(),
            by: "stream".into(),
            epoch: 0,
        }]
    );
    for not_a_hand_off in [
        "policy payments: scope 91ab: lease-store claim failed: answered with HTTP 503",
        "finalize: the lease was stolen; delivering the response unrecorded",
        "scope 91ab fence 2643: finalize failed: answered with HTTP 503",
    ] {
        let evidence = Evidence::read(&[], &[line(not_a_hand_off)], 0);
        assert_eq!(evidence.proxy_settles, vec![], "{not_a_hand_off}");
    }
}

#[test]
fn a_hot_restarted_childs_line_names_its_epoch() {
    let line = |epoch: &str| {
        format!(
            "[2026-12-01 16:36:44.250][31638][info][wasm] [source/extensions/common/wasm/\
             context.cc:1196] {epoch}wasm log keyflight keyflight: evidence=retired \
             scope=ab fence=41 call=finalize by=outbox | still held"
        )
    };
    let epoch = |text: &str| proxy_settle(0, text, 0).map(|settle| settle.epoch);
    assert_eq!(epoch(&line("epoch=2 ")), Some(2));
    assert_eq!(
        epoch(&line("")),
        Some(0),
        "an epoch-0 process marks nothing"
    );
}

#[test]
fn a_store_line_and_an_envoy_line_are_read_on_the_runs_clock() {
    let start = 1_796_143_004_000;
    let store = r#"{"timestamp":"2026-12-01T16:36:44.123456Z","level":"INFO","fields":{"message":"claim won","evidence":"claim_won","scope":"ab","fingerprint":"cd","claim_id":"0190-x","fence":41,"how":"orphan_takeover","lease_ms":3000,"at_most_once":true},"target":"keyflight_lease_store::evidence"}
{"timestamp":"2026-12-01T16:36:44.200Z","level":"INFO","fields":{"message":"settle applied","evidence":"settle","scope":"ab","claim_id":"0190-x","call":"finalize","outcome":"applied"},"target":"keyflight_lease_store::evidence"}
{"timestamp":"2026-12-01T16:36:44.300Z","level":"INFO","fields":{"message":"claim won","evidence":"claim_won"},"target":"keyflight_lease_store::api"}
not json"#;
    let envoy = "[2026-12-01 16:36:44.250][31638][info][wasm] wasm log keyflight keyflight: \
                 evidence=settle_landed scope=ab fence=41 call=finalize by=outbox | recorded\n\
                 [2026-12-01 16:36:44.260][31638][info][wasm] keyflight: scope ab: other";
    let evidence = Evidence::read(
        &[store.to_owned()],
        &[String::new(), envoy.to_owned()],
        start,
    );
    assert_eq!(
        evidence.claims,
        vec![ClaimWon {
            at_ms: 123,
            store: 0,
            scope: "ab".into(),
            fingerprint: "cd".into(),
            claim_id: "0190-x".into(),
            fence: 41,
            how: "orphan_takeover".into(),
            at_most_once: true,
        }],
        "an unknown `how` is kept as logged"
    );
    assert_eq!(evidence.store_settles.len(), 1);
    assert!(evidence.store_settles[0].applied());
    assert_eq!(
        evidence.proxy_settles,
        vec![ProxySettle {
            at_ms: 250,
            envoy: 1,
            event: "settle_landed".into(),
            scope: "ab".into(),
            fence: 41,
            call: "finalize".into(),
            by: "outbox".into(),
            epoch: 0,
        }]
    );
    assert_eq!(evidence.first_landed(&evidence.claims[0]), Some(200));
}

/// A release's line carries the database's stamps (Unix ms), read onto the run's clock:
/// the judge times the record's cooldown from them, not from the line.
#[test]
fn a_releases_database_stamps_are_read_on_the_runs_clock() {
    let start = 1_796_143_004_000;
    let line = r#"{"timestamp":"2026-12-01T16:36:46.500Z","level":"INFO","fields":{"message":"settle applied","evidence":"settle","scope":"ab","claim_id":"0190-x","call":"release_cooldown","outcome":"applied","repeat":true,"released_at_unix_ms":1796143004290,"cooldown_ends_at_unix_ms":1796143006290},"target":"keyflight_lease_store::evidence"}"#;
    let evidence = Evidence::read(&[line.to_owned()], &[], start);
    let settle = &evidence.store_settles[0];
    assert_eq!(
        (
            settle.at_ms,
            settle.repeat,
            settle.applied_at_ms,
            settle.cooldown_ends_at_ms
        ),
        (2500, true, Some(290), Some(2290))
    );
}

/// An orphan's release says what it left of the record: a takeover given back keeps
/// it, so the judge refuses a fresh insert after it (`rerun::chain_holds`).
#[test]
fn an_orphan_releases_line_says_what_it_left() {
    let line = r#"{"timestamp":"2026-12-01T16:36:46.500Z","level":"INFO","fields":{"message":"released an orphan claim: it committed, and its caller never got the answer","evidence":"settle","scope":"ab","claim_id":"0190-x","call":"release_orphan","outcome":"applied","fence":7,"leaves":"failed"},"target":"keyflight_lease_store::evidence"}"#;
    let evidence = Evidence::read(&[line.to_owned()], &[], 1_796_143_004_000);
    assert_eq!(evidence.store_settles[0].leaves.as_deref(), Some("failed"));
}
