//! The driver's callback rules (`docs/stream-machine.md#callback-rules`):
//! follow-ups run first, the first verdict answers the callback, a resume
//! inside a callback is that callback's answer, and only this stream's
//! callout answers are read.

use keyflight_protocol::wire::StoredResponse;

use super::*;
use crate::drive::host::{CalloutAnswered, Driver, HeaderMap, Host, LogLevel, read_answer};
use crate::metrics::{EventKind, OutboxEvent, Outcome};
use crate::store_call::Answer;

#[test]
fn a_reads_follow_up_runs_first_and_its_verdict_answers_the_callback() {
    // A bodyless request asks for its edge-cache slot inside the headers
    // callback; the hit's actions run before the rest of the headers' batch,
    // and its verdict is met first.
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let mut s = Harness::new(Rc::clone(&config));
    s.headers(keyed(), true);
    let response = StoredResponse::new(201, vec![], b"{}");
    s.replay_answer(response, Some(60_000));
    let mut next = s.next_stream();
    let out = next.headers(keyed(), true);
    assert!(
        matches!(
            out.as_slice(),
            [
                Action::ReadEdgeCache { .. },
                Action::Count(Metric::Outcome(Outcome::ReplayEdgeCache)),
                Action::Reply(_),
                Action::PauseRequest,
            ]
        ),
        "{out:?}"
    );
}

#[test]
fn a_resume_inside_a_callback_is_the_callbacks_answer_not_a_host_call() {
    // The claim cannot even be dispatched (no healthy lease-store host) and
    // the policy fails open: the machine resumes at once, inside the body
    // callback. Resuming there would leave Envoy holding the request for
    // good; continuing is the resume.
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"failure_mode": "open"}),
    ));
    s.headers(keyed(), false);
    s.host.refuse_dispatch = true;
    let out = s.body(b"{}");
    assert!(!out.contains(&Action::ResumeRequest), "{out:?}");
    assert_eq!(out.last(), Some(&Action::ContinueRequest));
    assert_eq!(
        counts(&out),
        vec![
            Metric::Event(EventKind::FailOpen),
            Metric::Outcome(Outcome::Unguarded)
        ]
    );
    // Outside a callback (a call answered), the resume is a host call.
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let out = s.claim_answer(&won(3));
    assert_eq!(out.last(), Some(&Action::ResumeRequest));
}

#[test]
fn a_held_response_resumed_inside_its_callback_continues() {
    // The release for a 500 cannot be dispatched: the claim goes to the
    // outbox, and the response, which would have been held for the answer,
    // goes out at once — as the callback's answer.
    let mut s = to_upstream(config());
    s.host.refuse_dispatch = true;
    let out = s.respond(500, true);
    assert!(!out.contains(&Action::ResumeResponse), "{out:?}");
    assert_eq!(out.last(), Some(&Action::ContinueResponse));
    assert!(counts(&out).contains(&Metric::Outbox(OutboxEvent::TakenOver)));
    assert!(s.held().is_some_and(|held| held.delivery.is_some()));
}

#[test]
fn a_callout_answer_is_read_only_when_it_is_this_streams() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let token = s.host.last_token().unwrap();
    assert!(s.answer_token(token + 1, Some(200), b"{}").is_empty());
    assert!(
        s.answer_token(token, Some(200), &serde_json::to_vec(&won(1)).unwrap())
            .contains(&Action::ResumeRequest)
    );
}

#[test]
fn a_headerless_answer_is_read_without_touching_the_map() {
    // A failed call arrives with zero headers (`docs/envoy-facts.md#callouts`).
    let mut host = FakeHost {
        call_headers: vec![h(":status", "200")],
        call_body: b"{}".to_vec(),
        ..FakeHost::default()
    };
    assert_eq!(
        read_answer(
            &mut host,
            CalloutAnswered {
                token: 1,
                num_headers: 0,
                body_size: 2
            }
        ),
        Answer::Received {
            status: None,
            body: vec![],
            framed: false,
        }
    );
    let answered = CalloutAnswered {
        token: 1,
        num_headers: 1,
        body_size: 2,
    };
    assert_eq!(read_answer(&mut host, answered), Answer::ok(b"{}".to_vec()));
    assert_eq!(
        host.header(HeaderMap::CallResponse, ":status"),
        Some(b"200".to_vec())
    );
}

/// An answer whose `Content-Type` names a frame is read as one (any parameters aside);
/// any other is JSON (`docs/records.md#the-recorded-body-as-bytes`).
#[test]
fn a_framed_answer_is_told_by_its_content_type() {
    let answered = CalloutAnswered {
        token: 1,
        num_headers: 2,
        body_size: 2,
    };
    for (content_type, framed) in [
        ("application/vnd.keyflight.framed.v1", true),
        ("Application/Vnd.Keyflight.Framed.V1; x=y", true),
        ("application/json", false),
        ("application/vnd.keyflight.framed.v2", false),
    ] {
        let mut host = FakeHost {
            call_headers: vec![h(":status", "200"), h("content-type", content_type)],
            call_body: b"{}".to_vec(),
            ..FakeHost::default()
        };
        assert_eq!(
            read_answer(&mut host, answered),
            Answer::Received {
                status: Some(200),
                body: b"{}".to_vec(),
                framed,
            },
            "{content_type}"
        );
    }
}

#[test]
fn an_unconfigured_plugin_passes_everything_through() {
    let mut stream = Stream::unconfigured(7);
    let mut host = FakeHost::default();
    for callback in [
        Callback::RequestHeaders {
            end_of_stream: false,
        },
        Callback::RequestBody {
            buffered_bytes: 3,
            end_of_stream: true,
        },
        Callback::ResponseHeaders {
            end_of_stream: true,
        },
    ] {
        assert_eq!(stream.on_callback(callback, &mut host), Verdict::Continue);
    }
    stream.on_done(&mut host);
    assert!(host.take().is_empty(), "no host call at all");
    assert_eq!(host.head_reads, 0);
}

#[test]
fn every_callback_gets_the_machines_own_answer() {
    // The driver falls back to Continue, with a warning, only if the machine
    // gave no verdict; a whole guarded flow never needs it.
    let mut s = to_upstream(config());
    let mut all = s.respond(201, false);
    all.extend(s.response_body(b"{}"));
    all.extend(s.ack());
    all.extend(s.done());
    assert!(
        !all.iter().any(|a| matches!(
            a,
            Action::Log {
                level: LogLevel::Warn,
                ..
            }
        )),
        "{all:?}"
    );
}
