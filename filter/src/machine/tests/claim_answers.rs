//! What the claim's answer does: replay a completed record, refuse, or fail
//! closed (or open) when the store cannot answer.

use keyflight_protocol::wire::{ReleaseAs, StoredResponse};

use super::*;
use crate::config::StatusProfile;
use crate::metrics::{EventKind, Outcome};

#[test]
fn completed_replays_the_record_with_allowlisted_headers() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let stored = StoredResponse::new(
        201,
        vec![
            ("content-type".into(), "application/json".into()),
            ("set-cookie".into(), "leak=1".into()),
            ("x-internal".into(), "no".into()),
            ("location".into(), "/payments/1".into()),
        ],
        br#"{"id":1}"#,
    );
    let out = s.claim_answer(&ClaimResponse::Completed { response: stored });
    let r = reply(&out);
    assert_eq!(r.status, 201);
    assert_eq!(r.body, br#"{"id":1}"#);
    assert_eq!(
        r.headers,
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("location".to_owned(), "/payments/1".to_owned()),
            ("idempotent-replayed".to_owned(), "true".to_owned()),
        ]
    );
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Replay)]);
    assert!(!out.contains(&Action::ResumeRequest));
    // The replay re-enters the response callbacks: it is ours, not an upstream answer.
    assert_eq!(s.respond(201, false), vec![Action::ContinueResponse]);
    assert_eq!(s.response_chunk(8, true), vec![Action::ContinueResponse]);
    assert_eq!(s.host.head_reads, 0);
    assert_eq!(s.done(), vec![]);
}

#[test]
fn an_encoded_record_replays_only_to_a_client_that_decodes_it() {
    let gzip_record = || ClaimResponse::Completed {
        response: StoredResponse::new(
            201,
            vec![
                ("content-type".into(), "application/json".into()),
                ("content-encoding".into(), "gzip".into()),
            ],
            b"\x1f\x8b...",
        ),
    };
    // A client that names no coding gets a clear refusal, not gzip bytes.
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let out = s.claim_answer(&gzip_record());
    let r = reply(&out);
    assert_eq!(
        (r.status, code(r).as_str()),
        (409, "response_not_replayable")
    );
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::NotReplayable)]);

    // One that accepts gzip gets the body with its label.
    let mut s = Harness::new(config());
    let mut headers = keyed();
    headers.push(h("accept-encoding", "br, gzip;q=0.8"));
    s.headers(headers, true);
    let out = s.claim_answer(&gzip_record());
    let r = reply(&out);
    assert_eq!(r.status, 201);
    assert_eq!(header(r, "content-encoding"), Some("gzip"));
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Replay)]);
}

#[test]
fn a_malformed_record_is_journal_unavailable() {
    let broken =
        br#"{"outcome":"completed","response":{"status":200,"headers":[],"body_b64":"***"}}"#;
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let out = s.answer(Some(200), broken);
    assert_eq!(code(reply(&out)), "journal_unavailable");
    // A status that is not final cannot be replayed either.
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let out = s.claim_answer(&ClaimResponse::Completed {
        response: StoredResponse::new(99, vec![], b""),
    });
    assert_eq!(code(reply(&out)), "journal_unavailable");
    // Never forwarded, not even under `failure_mode: open`: the operation ran.
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"failure_mode": "open"}),
    ));
    s.drive_to_claim(b"{}");
    let out = s.answer(Some(200), broken);
    assert_eq!(code(reply(&out)), "journal_unavailable");
    assert!(!out.contains(&Action::ResumeRequest), "{out:?}");
}

#[test]
fn refusing_outcomes_under_both_profiles() {
    use StatusProfile::{Ietf, Keyflight};
    let cases = [
        (
            ClaimResponse::Conflict,
            Keyflight,
            409,
            "idempotency_conflict",
            None,
        ),
        (
            ClaimResponse::Conflict,
            Ietf,
            422,
            "idempotency_conflict",
            None,
        ),
        (
            ClaimResponse::InProgress { retry_after_s: 4 },
            Keyflight,
            503,
            "request_in_progress",
            Some("4"),
        ),
        (
            ClaimResponse::InProgress { retry_after_s: 4 },
            Ietf,
            409,
            "request_in_progress",
            Some("4"),
        ),
        (
            ClaimResponse::Cooldown { retry_after_s: 2 },
            Keyflight,
            503,
            "retryable_cooldown",
            Some("2"),
        ),
        (
            ClaimResponse::Cooldown { retry_after_s: 2 },
            Ietf,
            503,
            "retryable_cooldown",
            Some("2"),
        ),
        (
            ClaimResponse::NotReplayable,
            Keyflight,
            409,
            "response_not_replayable",
            None,
        ),
        (
            ClaimResponse::Unknown { fence: Some(3) },
            Ietf,
            409,
            "operation_unknown",
            None,
        ),
    ];
    for (answer, profile, status, want, retry_after) in cases {
        let profile_name = match profile {
            Keyflight => "keyflight",
            Ietf => "ietf",
        };
        let mut s = Harness::new(config_with(
            serde_json::json!({"status_profile": profile_name}),
            serde_json::json!({}),
        ));
        s.drive_to_claim(b"{}");
        let out = s.claim_answer(&answer);
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str()),
            (status, want),
            "{answer:?} {profile:?}"
        );
        assert_eq!(header(r, "retry-after"), retry_after, "{answer:?}");
        assert!(!out.contains(&Action::ResumeRequest));
        assert_eq!(s.respond(status, true), vec![Action::ContinueResponse]);
    }
}

#[test]
fn a_cooldown_counts_the_event_and_the_outcome() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let out = s.claim_answer(&ClaimResponse::Cooldown { retry_after_s: 2 });
    assert_eq!(
        counts(&out),
        vec![
            Metric::Event(EventKind::RetryableCooldown),
            Metric::Outcome(Outcome::Failed)
        ]
    );
}

/// A 503 `journal_unavailable` that never lets the request through.
fn assert_failed_closed(out: &[Action], what: &str) {
    let r = reply(out);
    assert_eq!((r.status, code(r).as_str()), (503, "journal_unavailable"));
    assert_eq!(header(r, "retry-after"), Some("1"));
    assert!(
        !out.contains(&Action::ResumeRequest) && !out.contains(&Action::ContinueRequest),
        "{what}: upstream must not be called"
    );
    assert_eq!(
        counts(out),
        vec![Metric::Outcome(Outcome::JournalUnavailable)]
    );
}

#[test]
fn store_failure_fails_closed_by_default() {
    for error in [
        CallError::NoAnswer,
        CallError::Status(503),
        CallError::Malformed,
    ] {
        let mut s = Harness::new(config());
        s.drive_to_claim(b"{}");
        let out = s.fail(error);
        assert_failed_closed(&out, &format!("{error:?}"));
    }
    // A claim the host cannot even dispatch fails within the body callback.
    let mut s = Harness::new(config());
    s.headers(keyed(), false);
    s.host.refuse_dispatch = true;
    let out = s.body(b"{}");
    assert_failed_closed(&out, "not dispatched");
    assert_eq!(out.last(), Some(&Action::PauseRequest));
}

#[test]
fn store_failure_with_failure_mode_open_passes_unguarded() {
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"failure_mode": "open"}),
    ));
    s.drive_to_claim(b"{}");
    let out = s.fail(CallError::NoAnswer);
    assert!(out.contains(&Action::ResumeRequest));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::Reply(_) | Action::SetRequestHeader { .. }))
    );
    assert_eq!(
        counts(&out),
        vec![
            Metric::Event(EventKind::FailOpen),
            Metric::Outcome(Outcome::Unguarded)
        ]
    );
    assert_eq!(s.respond(200, true), vec![Action::ContinueResponse]);
}

/// A won claim answered so late that a renew could no longer land before its lease runs
/// out (a store frozen after it committed, a lossy link that held the answer back): the
/// lease may be another proxy's by now, so the request must not go upstream. Nothing ran,
/// so the claim is released as never run (`forget`), through the outbox, and the caller
/// is told to retry (`docs/stream-machine.md#the-claim`).
#[test]
fn a_won_claim_answered_too_late_to_renew_in_time_is_released_not_forwarded() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    s.host.now_ms += 29_000;
    let out = s.claim_answer(&won(7));
    assert!(!out.contains(&Action::ResumeRequest), "{out:?}");
    assert_eq!(reply(&out).status, 503);
    assert!(
        counts(&out).contains(&Metric::Event(EventKind::ClaimAnsweredLate)),
        "{out:?}"
    );
    let delivery = s
        .held()
        .and_then(|held| held.delivery)
        .expect("the outbox releases the claim");
    assert!(
        matches!(
            delivery.call,
            StoreCall::Release { ref request, .. }
                if request.release_as == ReleaseAs::Forget && request.claim_id == CLAIM
        ),
        "{delivery:?}"
    );
    // The judge's evidence that fence 7 never ran (`chaos/src/checker/rerun.rs`).
    assert!(
        out.iter().any(|action| matches!(
            action,
            Action::Log { message, .. }
                if message.starts_with("evidence=not_forwarded ")
                    && message.contains(" fence=7 call=release_forget by=stream | ")
        )),
        "{out:?}"
    );
}

/// The lease runs from when the store committed the claim, which is after the proxy sent
/// it: the first renew is due one interval after the claim was sent, not after its answer
/// arrived, or a slow answer would eat into the slack the renew rule leaves.
#[test]
fn a_claim_answered_late_but_in_time_renews_one_interval_after_it_was_sent() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    s.host.now_ms += 4_000;
    let out = s.claim_answer(&won(7));
    assert!(out.contains(&Action::ResumeRequest), "{out:?}");
    let mut outbox = s.worker.outbox();
    assert!(outbox.on_tick(NOW_MS + 9_999).is_empty());
    assert_eq!(
        outbox.on_tick(NOW_MS + 10_000).len(),
        1,
        "the first renew is due"
    );
}

/// A store slow before it committed (a queue, a long-poll that ended in a takeover) is not
/// a late lease: it says how long it took up to the commit, and only the rest of the round
/// trip counts against the lease.
#[test]
fn a_won_claim_slow_only_before_its_commit_is_forwarded() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    s.host.now_ms += 29_000;
    let mut answer = serde_json::to_value(won(7)).unwrap();
    answer["claimed_after_ms"] = serde_json::json!(28_900);
    let out = s.answer(Some(200), &serde_json::to_vec(&answer).unwrap());
    assert!(out.contains(&Action::ResumeRequest), "{out:?}");
}
