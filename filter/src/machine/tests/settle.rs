//! Settling the claim: the settle call's answer, and a claim the stream
//! cannot see settled passing to the worker's record outbox (F14).

use keyflight_protocol::wire::ReleaseAs;

use super::*;
use crate::metrics::{EventKind, OutboxEvent, Outcome};
use crate::outbox::{CallId, CallKind, HeldDelivery};

/// The policy's default `record_retry_budget_ms`.
const BUDGET_MS: u64 = 120_000;

#[test]
fn a_failed_settle_call_delivers_the_response_and_hands_the_claim_to_the_outbox() {
    for (error, retried_at_once) in [
        (CallError::NoAnswer, false),
        (CallError::Status(503), false),
        // 413: the store will never take this finalize; the outbox sends the
        // not-replayable one at once instead (`docs/record-outbox.md#delivery`).
        (CallError::Status(413), true),
    ] {
        let mut s = to_upstream(config());
        let out = s.respond(200, true);
        let call = single_call(&out);
        let out = s.fail(error);
        let mut want = vec![
            Metric::Event(EventKind::FinalizeError),
            Metric::Outbox(OutboxEvent::TakenOver),
        ];
        if retried_at_once {
            want.push(Metric::Outbox(OutboxEvent::Downgraded));
        }
        assert_eq!(counts(&out), want, "{error:?}");
        let Some(Held {
            renewing: true,
            delivery:
                Some(HeldDelivery {
                    call: delivering,
                    next_attempt_ms,
                    give_up_at_ms,
                }),
        }) = s.held()
        else {
            panic!(
                "{error:?}: the outbox keeps renewing and delivers: {:?}",
                s.held()
            )
        };
        if retried_at_once {
            let StoreCall::Finalize { request, .. } = &delivering else {
                panic!("{delivering:?}")
            };
            assert!(!request.replayable && request.response.body.is_empty());
            assert_eq!(next_attempt_ms, NOW_MS);
        } else {
            assert_eq!(delivering, call, "the outbox gets the same call");
            assert!(
                (NOW_MS + 50..=NOW_MS + 100).contains(&next_attempt_ms),
                "{error:?}: the first retry waits out a backoff, {next_attempt_ms}"
            );
        }
        assert_eq!(give_up_at_ms, NOW_MS + BUDGET_MS);
        assert_eq!(out.last(), Some(&Action::ResumeResponse), "not held longer");
        assert!(
            out.iter().any(|a| matches!(a, Action::Log { message, .. }
                if message.starts_with("evidence=handoff ") && message.contains(" fence=3 "))),
            "the hand-off is logged with the fence the upstream saw: {out:?}"
        );
        assert_eq!(s.done(), vec![], "handed off once");
    }
    let mut s = to_upstream(config());
    s.respond(500, true);
    let out = s.fail(CallError::NoAnswer);
    assert_eq!(
        counts(&out),
        vec![
            Metric::Event(EventKind::ReleaseError),
            Metric::Outbox(OutboxEvent::TakenOver)
        ]
    );
    let delivery = s.held().and_then(|held| held.delivery).unwrap();
    assert!(matches!(
        delivery.call,
        StoreCall::Release { ref request, .. } if request.release_as == ReleaseAs::Cooldown
    ));
    assert!(out.contains(&Action::ResumeResponse));
}

#[test]
fn a_stolen_lease_is_counted_once_and_nothing_is_handed_off() {
    let mut s = to_upstream(config());
    s.respond(200, true);
    let out = s.fail(CallError::LeaseLost);
    assert_eq!(counts(&out), vec![Metric::Event(EventKind::LeaseStolen)]);
    assert_eq!(s.held(), None, "renewal stopped, nothing delivered");
    assert!(out.contains(&Action::ResumeResponse));

    // A renew that already found the theft counted it: the outbox must hear
    // of the stream's answer before it forgets the claim.
    let mut s = to_upstream(config());
    s.respond(200, true);
    let renew = CallId {
        claim_id: CLAIM,
        kind: CallKind::Renew,
    };
    let renewed = s
        .worker
        .outbox()
        .on_answer(renew, Err(CallError::LeaseLost), NOW_MS);
    assert_eq!(
        renewed,
        vec![crate::outbox::OutboxAction::Count(Metric::Event(
            EventKind::LeaseStolen
        ))]
    );
    let out = s.fail(CallError::LeaseLost);
    assert!(counts(&out).is_empty(), "counted once: {out:?}");
    assert_eq!(s.held(), None);
}

#[test]
fn a_caller_gone_while_the_upstream_runs_hands_off_a_release_per_uncertain() {
    for (uncertain, release_as, outcome) in [
        ("retry", ReleaseAs::Cooldown, Outcome::Failed),
        ("hold", ReleaseAs::Unknown, Outcome::OperationUnknown),
    ] {
        let mut s = to_upstream(config_with(
            serde_json::json!({}),
            serde_json::json!({"uncertain": uncertain, "record_retry_budget_ms": 5000}),
        ));
        let out = s.done();
        assert_eq!(
            counts(&out),
            vec![
                Metric::Outcome(outcome),
                Metric::Event(EventKind::CallerGone),
                Metric::Outbox(OutboxEvent::TakenOver),
            ]
        );
        let held = s.held().unwrap();
        assert!(held.renewing);
        let delivery = held.delivery.unwrap();
        assert_eq!(
            delivery.next_attempt_ms, NOW_MS,
            "no attempt was made yet: the outbox sends it at its next tick"
        );
        assert_eq!(delivery.give_up_at_ms, NOW_MS + 5000);
        let StoreCall::Release { request, .. } = delivery.call else {
            panic!("{uncertain}: a release, got {:?}", delivery.call)
        };
        assert_eq!(request.release_as, release_as, "{uncertain}");
        assert_eq!(request.claim_id, CLAIM);
        assert_eq!(s.done(), vec![], "once");
    }
}

#[test]
fn a_caller_gone_while_the_answer_is_read_records_it_completed_not_replayable() {
    let mut s = to_upstream(config());
    s.respond(201, false);
    s.response_chunk(4, false);
    let out = s.done();
    assert_eq!(
        counts(&out),
        vec![
            Metric::Outcome(Outcome::CompletedUncacheable),
            Metric::Event(EventKind::CallerGone),
            Metric::Outbox(OutboxEvent::TakenOver),
        ]
    );
    let delivery = s.held().and_then(|held| held.delivery).unwrap();
    let StoreCall::Finalize { request, .. } = delivery.call else {
        panic!("a finalize, got {:?}", delivery.call)
    };
    assert!(!request.replayable, "the body was never read whole");
    assert_eq!(request.response.status, 201);
    assert!(request.response.body.is_empty());
}

#[test]
fn a_stream_ending_with_its_settle_call_in_flight_hands_that_call_off() {
    let mut s = to_upstream(config());
    let out = s.respond(201, true);
    let call = single_call(&out);
    let out = s.done();
    assert_eq!(
        counts(&out),
        vec![Metric::Outbox(OutboxEvent::TakenOver)],
        "counted when it was recorded: {out:?}"
    );
    assert_eq!(
        s.held().and_then(|held| held.delivery),
        Some(HeldDelivery {
            call,
            next_attempt_ms: NOW_MS,
            give_up_at_ms: NOW_MS + BUDGET_MS,
        })
    );
    assert_eq!(
        s.ack(),
        vec![],
        "a late answer (never delivered by the host) changes nothing"
    );
}

#[test]
fn a_stream_ending_after_its_record_landed_hands_nothing_off() {
    let mut s = to_upstream(config());
    s.respond(201, true);
    s.ack();
    assert_eq!(s.done(), vec![]);
    assert_eq!(s.held(), None);
}

#[test]
fn answers_nobody_waits_for_are_ignored() {
    // No call in flight: whatever the host delivers is not read.
    let mut s = Harness::new(config());
    assert!(
        s.answer_token(1, Some(200), &serde_json::to_vec(&won(1)).unwrap())
            .is_empty()
    );
    let mut s = to_upstream(config());
    let claimed = s.host.last_token().unwrap();
    assert!(
        s.answer_token(claimed, Some(200), &serde_json::to_vec(&won(1)).unwrap())
            .is_empty(),
        "the claim already answered"
    );
    // The finalize in flight answers only to its own token.
    let out = s.respond(200, true);
    assert_eq!(calls(&out).len(), 1);
    assert!(s.answer_token(claimed, Some(200), b"{}").is_empty());
    assert_eq!(
        without_logs(s.ack()),
        vec![Action::ResumeResponse],
        "the won request's response is still recorded and released"
    );
}

/// The evidence lines in `out` (`filter/src/log.rs`).
fn evidence_lines(out: &[Action]) -> Vec<&str> {
    out.iter()
        .filter_map(|a| match a {
            Action::Log { message, .. } if message.starts_with("evidence=") => {
                Some(message.as_str())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_settle_the_stream_landed_and_a_caller_gone_hand_off_are_evidence_lines_with_the_fence() {
    let (scope, _) = claim_of(config(), br#"{"amount": 10}"#);
    let mut s = to_upstream(config());
    s.respond(201, true);
    let landed = s.ack();
    let want = format!(
        "evidence=settle_landed scope={} fence=3 call=finalize by=stream | ",
        scope.to_hex()
    );
    assert!(
        matches!(&evidence_lines(&landed)[..], [line] if line.starts_with(&want)),
        "{landed:?}"
    );
    assert!(evidence_lines(&s.done()).is_empty(), "landed once");

    let mut s = to_upstream(config_with(
        serde_json::json!({}),
        serde_json::json!({"uncertain": "hold"}),
    ));
    let gone = s.done();
    let want = format!(
        "evidence=handoff scope={} fence=3 call=release_unknown by=stream | ",
        scope.to_hex()
    );
    assert!(
        matches!(&evidence_lines(&gone)[..], [line] if line.starts_with(&want)),
        "{gone:?}"
    );
}
