//! The IETF draft's semantics as per-policy settings (F3, F5, F6):
//! `mismatch_status`, `in_progress` and `server_errors` / `uncertain: record`,
//! each off by default (`docs/stream-machine.md#the-ietf-drafts-semantics`).

use std::time::Duration;

use keyflight_protocol::wire::{ReleaseAs, StoredResponse};
use proptest::prelude::*;

use super::*;
use crate::metrics::{EventKind, Outcome};

#[test]
fn a_mismatch_answers_409_unless_the_policy_or_the_profile_says_422() {
    let cases = [
        ("keyflight", None, 409),
        ("keyflight", Some(422), 422),
        ("ietf", None, 422),
        ("ietf", Some(409), 409),
    ];
    for (profile, mismatch_status, want) in cases {
        let mut policy = serde_json::json!({});
        if let Some(status) = mismatch_status {
            policy["mismatch_status"] = status.into();
        }
        let mut s = Harness::new(config_with(
            serde_json::json!({"status_profile": profile}),
            policy,
        ));
        s.drive_to_claim(b"{}");
        let out = s.claim_answer(&ClaimResponse::Conflict);
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str()),
            (want, "idempotency_conflict"),
            "{profile} {mismatch_status:?}"
        );
        assert_eq!(header(r, "content-type"), Some("application/problem+json"));
        assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Conflict)]);
    }
}

#[test]
fn under_in_progress_conflict_a_follower_does_not_wait_and_gets_409_with_retry_after() {
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"in_progress": "conflict"}),
    ));
    s.headers(keyed(), false);
    let out = s.body(b"{}");
    let [Action::CallStore { call, timeout }] = out
        .iter()
        .filter(|a| matches!(a, Action::CallStore { .. }))
        .collect::<Vec<_>>()[..]
    else {
        panic!("one claim: {out:?}")
    };
    let StoreCall::Claim { request, .. } = call else {
        panic!("{call:?}")
    };
    assert_eq!(request.wait_ms, None, "no long-poll");
    assert_eq!(
        *timeout,
        Duration::from_millis(1000),
        "the call timeout alone"
    );

    let out = s.claim_answer(&ClaimResponse::InProgress { retry_after_s: 3 });
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (409, "request_in_progress"));
    assert_eq!(header(r, "retry-after"), Some("3"));
    assert!(
        !counts(&out).contains(&Metric::Event(EventKind::FollowerWait)),
        "{out:?}"
    );
    assert!(!out.contains(&Action::ResumeRequest));
}

#[test]
fn under_in_progress_wait_a_follower_long_polls_then_gets_the_profiles_status() {
    for (profile, want) in [("keyflight", 503), ("ietf", 409)] {
        let mut s = Harness::new(config_with(
            serde_json::json!({"status_profile": profile}),
            serde_json::json!({"in_progress": "wait", "follower_wait_ms": 700}),
        ));
        let StoreCall::Claim { request, .. } = s.drive_to_claim(b"{}") else {
            panic!("a claim")
        };
        assert_eq!(request.wait_ms, Some(700));
        let out = s.claim_answer(&ClaimResponse::InProgress { retry_after_s: 2 });
        let r = reply(&out);
        assert_eq!((r.status, code(r).as_str()), (want, "request_in_progress"));
        assert_eq!(header(r, "retry-after"), Some("2"));
    }
}

/// Drives an upstream `status` of `origin`, with a body, to its settle call.
fn settle_call(policy: serde_json::Value, status: u16, origin: ResponseOrigin) -> StoreCall {
    let mut s = to_upstream(config_with(serde_json::json!({}), policy));
    let out = s.respond_from(status, origin, false);
    if let Some(call) = calls(&out).first() {
        return (*call).clone();
    }
    assert_eq!(out, vec![Action::PauseResponse], "buffered to record");
    let out = s.response_body(br#"{"error":"boom"}"#);
    assert!(!out.contains(&Action::ResumeResponse), "held (F7)");
    single_call(&out)
}

#[test]
fn under_server_errors_record_the_upstreams_5xx_is_finalized_with_its_body() {
    for status in [500, 502, 503, 599] {
        let call = settle_call(
            serde_json::json!({"server_errors": "record"}),
            status,
            ResponseOrigin::Upstream,
        );
        let StoreCall::Finalize { request, .. } = call else {
            panic!("{status}: {call:?}")
        };
        assert!(request.replayable, "{status}");
        assert_eq!(request.response.status, status);
        assert_eq!(request.response.body, br#"{"error":"boom"}"#);
    }
}

#[test]
fn recording_server_errors_leaves_408_429_and_proxy_answers_alone() {
    let policy = serde_json::json!({"server_errors": "record", "uncertain": "retry"});
    for (status, origin, want) in [
        (408, ResponseOrigin::Upstream, ReleaseAs::Cooldown),
        (429, ResponseOrigin::Upstream, ReleaseAs::Cooldown),
        (503, ResponseOrigin::ProxyNotSent, ReleaseAs::Cooldown),
        (504, ResponseOrigin::Proxy, ReleaseAs::Cooldown),
    ] {
        let call = settle_call(policy.clone(), status, origin);
        let StoreCall::Release { request, .. } = call else {
            panic!("{status} {origin:?}: {call:?}")
        };
        assert_eq!(request.release_as, want, "{status} {origin:?}");
    }
}

#[test]
fn by_default_the_upstreams_5xx_cools_down() {
    let call = settle_call(serde_json::json!({}), 500, ResponseOrigin::Upstream);
    let StoreCall::Release { request, .. } = call else {
        panic!("{call:?}")
    };
    assert_eq!(request.release_as, ReleaseAs::Cooldown);
}

#[test]
fn under_uncertain_record_the_proxys_answer_is_finalized() {
    let call = settle_call(
        serde_json::json!({"uncertain": "record"}),
        504,
        ResponseOrigin::Proxy,
    );
    let StoreCall::Finalize { request, .. } = call else {
        panic!("{call:?}")
    };
    assert!(request.replayable);
    assert_eq!(request.response.status, 504);
    // Never sent is not uncertain: still a plain retryable failure.
    let call = settle_call(
        serde_json::json!({"uncertain": "record"}),
        503,
        ResponseOrigin::ProxyNotSent,
    );
    assert!(
        matches!(&call, StoreCall::Release { request, .. } if request.release_as == ReleaseAs::Cooldown),
        "{call:?}"
    );
}

#[test]
fn under_uncertain_record_a_caller_gone_mid_run_is_held_as_unknown() {
    let mut s = to_upstream(config_with(
        serde_json::json!({}),
        serde_json::json!({"uncertain": "record"}),
    ));
    let out = s.done();
    assert!(
        counts(&out).contains(&Metric::Outcome(Outcome::OperationUnknown)),
        "{out:?}"
    );
    let delivery = s.held().and_then(|held| held.delivery);
    assert!(
        matches!(&delivery, Some(d) if matches!(&d.call,
            StoreCall::Release { request, .. } if request.release_as == ReleaseAs::Unknown)),
        "{delivery:?}"
    );
}

#[test]
fn a_recorded_5xx_replays_with_the_replay_marker() {
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"server_errors": "record"}),
    ));
    s.drive_to_claim(b"{}");
    let stored = StoredResponse::new(
        500,
        vec![("content-type".into(), "application/json".into())],
        br#"{"error":"boom"}"#,
    );
    let out = s.claim_answer(&ClaimResponse::Completed { response: stored });
    let r = reply(&out);
    assert_eq!(r.status, 500);
    assert_eq!(r.body, br#"{"error":"boom"}"#);
    assert_eq!(header(r, "idempotent-replayed"), Some("true"));
}

proptest! {
    /// Whatever the settings, an answer is recorded exactly where the status
    /// matrix records it, plus the upstream's own 5xx under
    /// `server_errors: record` and an uncertain answer under
    /// `uncertain: record`; and the response waits for the settle call (F7).
    #[test]
    fn an_answer_is_recorded_exactly_where_the_settings_say(
        status in 200u16..=599,
        origin in prop_oneof![
            Just(ResponseOrigin::Upstream),
            Just(ResponseOrigin::Proxy),
            Just(ResponseOrigin::ProxyNotSent),
        ],
        record_server_errors in any::<bool>(),
        uncertain in prop_oneof![Just("retry"), Just("hold"), Just("record")],
    ) {
        let policy = serde_json::json!({
            "server_errors": if record_server_errors { "record" } else { "cooldown" },
            "uncertain": uncertain,
        });
        let by_default = matches!(
            settle_call(serde_json::json!({}), status, origin),
            StoreCall::Finalize { .. }
        );
        let server_error = (500..=599).contains(&status);
        let uncertain_answer = origin == ResponseOrigin::Proxy && (status == 408 || server_error);
        let want = by_default
            || (record_server_errors && server_error && origin == ResponseOrigin::Upstream)
            || (uncertain == "record" && uncertain_answer);
        let call = settle_call(policy, status, origin);
        prop_assert_eq!(matches!(call, StoreCall::Finalize { .. }), want, "{:?}", call);
    }
}
