//! `record: after_reply`: a recorded answer goes out at once and the outbox lands
//! its finalize (`docs/stream-machine.md#recording-after-the-reply`).

use keyflight_protocol::wire::FinalizeRequest;

use super::*;
use crate::metrics::{EventKind, OutboxEvent, Outcome};
use crate::outbox::HeldDelivery;

fn after_reply() -> Rc<Config> {
    config_with(
        serde_json::json!({}),
        serde_json::json!({"record": "after_reply"}),
    )
}

/// The stream makes no call of its own, resumes the response, and the outbox holds the
/// finalize, due at once, with the lease still renewed; returns that finalize.
fn assert_handed_off_and_delivered(s: &Harness, out: &[Action]) -> FinalizeRequest {
    assert_eq!(
        calls(out),
        Vec::<&StoreCall>::new(),
        "no call from the stream: {out:?}"
    );
    assert_eq!(
        counts(out),
        vec![
            Metric::Outcome(Outcome::WonCompleted),
            Metric::Event(EventKind::RecordedAfterReply),
            Metric::Outbox(OutboxEvent::TakenOver),
        ]
    );
    assert_eq!(
        out.last(),
        Some(&Action::ContinueResponse),
        "the answer goes out with this callback"
    );
    assert!(
        out.iter().any(|a| matches!(a, Action::Log { message, .. }
            if message.starts_with("evidence=handoff ") && message.contains(" fence=3 "))),
        "the hand-off is logged as evidence with the fence the upstream saw: {out:?}"
    );
    let Some(Held {
        renewing: true,
        delivery:
            Some(HeldDelivery {
                call: StoreCall::Finalize { request, .. },
                next_attempt_ms,
                ..
            }),
    }) = s.held()
    else {
        panic!(
            "the outbox renews the lease and delivers the finalize: {:?}",
            s.held()
        )
    };
    assert!(request.replayable, "{request:?}");
    assert_eq!(next_attempt_ms, NOW_MS, "sent from the worker's next tick");
    request
}

#[test]
fn an_answer_without_a_body_goes_out_before_its_record_lands() {
    let mut s = to_upstream(after_reply());
    let out = s.respond(201, true);
    assert_handed_off_and_delivered(&s, &out);
    assert_eq!(
        s.done(),
        vec![],
        "handed off once: the stream's end adds nothing"
    );
}

#[test]
fn an_answer_with_a_body_goes_out_before_its_record_lands() {
    let mut s = to_upstream(after_reply());
    let out = s.respond(201, false);
    assert_eq!(calls(&out), Vec::<&StoreCall>::new());
    let out = s.response_body(br#"{"id":"p-1"}"#);
    let out: Vec<Action> = out
        .into_iter()
        .filter(|a| !matches!(a, Action::ReadResponseBody { .. }))
        .collect();
    let request = assert_handed_off_and_delivered(&s, &out);
    assert_eq!(request.response.body, br#"{"id":"p-1"}"#);
}

#[test]
fn the_default_holds_the_answer_until_its_finalize_lands() {
    let mut s = to_upstream(config());
    let out = s.respond(201, true);
    assert!(
        matches!(single_call(&out), StoreCall::Finalize { .. }),
        "the stream's own finalize: {out:?}"
    );
    assert!(
        !out.contains(&Action::ContinueResponse) && !out.contains(&Action::ResumeResponse),
        "held: {out:?}"
    );
    let out = s.ack();
    assert_eq!(
        out.last(),
        Some(&Action::ResumeResponse),
        "let go once it landed"
    );
}

#[test]
fn releases_and_answers_too_large_to_replay_still_settle_from_the_stream() {
    let mut released = to_upstream(after_reply());
    let out = released.respond(500, true);
    assert!(
        matches!(single_call(&out), StoreCall::Release { .. }),
        "a release holds the response so a retry sees it: {out:?}"
    );
    let mut too_large = to_upstream(after_reply());
    too_large.respond(201, false);
    let over = too_large_body_bytes(&after_reply());
    let out = too_large.response_chunk(over, false);
    let StoreCall::Finalize { request, .. } = single_call(&out) else {
        panic!("{out:?}")
    };
    assert!(!request.replayable, "{request:?}");
}

/// One byte over the policy's `max_cacheable_response_bytes`.
fn too_large_body_bytes(config: &Config) -> usize {
    config.policies[0].max_cacheable_response_bytes + 1
}
