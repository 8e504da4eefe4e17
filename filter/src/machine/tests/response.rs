//! The upstream's answer: the status matrix, buffering and holding a
//! response to record, and one too large to keep.

use keyflight_protocol::wire::{ReleaseAs, StoredResponse};

use super::*;
use crate::identity;
use crate::machine::{Event, Machine};
use crate::metrics::Outcome;
use crate::store_call::Answer;

/// What a policy does with an upstream `status` carrying a `location`:
/// the finalize's recorded response, or `None` for a forget release.
fn recorded_redirect(policy: serde_json::Value, status: u16) -> Option<StoredResponse> {
    let mut s = to_upstream(config_with(serde_json::json!({}), policy));
    let out = s.respond_with(
        status,
        ResponseOrigin::Upstream,
        &[("location", "/payments/p-1")],
        true,
    );
    match single_call(&out) {
        StoreCall::Finalize { request, .. } => Some(request.response),
        StoreCall::Release { request, .. } => {
            assert_eq!(request.release_as, ReleaseAs::Forget, "{status}");
            None
        }
        other => panic!("{status}: unexpected call {other:?}"),
    }
}

#[test]
fn a_303_after_a_post_is_recorded_with_its_location_and_other_redirects_are_forgotten() {
    // POST-redirect-GET: the 303 says the operation completed; a retry must
    // replay it, `location` included, not run the payment again.
    let recorded = recorded_redirect(serde_json::json!({}), 303).expect("303 is recorded");
    assert_eq!(recorded.status, 303);
    assert!(
        recorded
            .headers
            .contains(&("location".to_owned(), "/payments/p-1".to_owned())),
        "{recorded:?}"
    );
    // A 302 or 307 may be a redirect to a login page, a 301 or 308 a moved
    // resource: nothing ran, so by default the retry runs.
    for status in [301, 302, 307, 308] {
        assert_eq!(recorded_redirect(serde_json::json!({}), status), None);
    }
}

#[test]
fn a_policy_names_the_statuses_it_forgets() {
    let policy = serde_json::json!({"forget_statuses": [401, 303]});
    assert_eq!(recorded_redirect(policy.clone(), 401), None);
    assert_eq!(recorded_redirect(policy.clone(), 303), None);
    for status in [302, 403, 405] {
        let recorded = recorded_redirect(policy.clone(), status);
        assert_eq!(recorded.map(|r| r.status), Some(status));
    }
}

#[test]
fn the_status_matrix_decides_what_is_recorded() {
    enum Want {
        Finalize,
        Release(ReleaseAs, Option<u64>),
    }
    let cases = [
        (
            200,
            ResponseOrigin::Upstream,
            "retry",
            Want::Finalize,
            Outcome::WonCompleted,
        ),
        (
            404,
            ResponseOrigin::Upstream,
            "retry",
            Want::Finalize,
            Outcome::WonCompleted,
        ),
        (
            422,
            ResponseOrigin::Upstream,
            "retry",
            Want::Finalize,
            Outcome::WonCompleted,
        ),
        (
            401,
            ResponseOrigin::Upstream,
            "retry",
            Want::Release(ReleaseAs::Forget, None),
            Outcome::NotRecorded,
        ),
        (
            302,
            ResponseOrigin::Upstream,
            "retry",
            Want::Release(ReleaseAs::Forget, None),
            Outcome::NotRecorded,
        ),
        (
            500,
            ResponseOrigin::Upstream,
            "retry",
            Want::Release(ReleaseAs::Cooldown, Some(2000)),
            Outcome::Failed,
        ),
        (
            429,
            ResponseOrigin::Upstream,
            "hold",
            Want::Release(ReleaseAs::Cooldown, Some(2000)),
            Outcome::Failed,
        ),
        (
            503,
            ResponseOrigin::Proxy,
            "retry",
            Want::Release(ReleaseAs::Cooldown, Some(2000)),
            Outcome::Failed,
        ),
        (
            504,
            ResponseOrigin::Proxy,
            "hold",
            Want::Release(ReleaseAs::Unknown, None),
            Outcome::OperationUnknown,
        ),
        (
            503,
            ResponseOrigin::ProxyNotSent,
            "hold",
            Want::Release(ReleaseAs::Cooldown, Some(2000)),
            Outcome::Failed,
        ),
    ];
    for (status, origin, uncertain, want, outcome) in cases {
        let mut s = to_upstream(config_with(
            serde_json::json!({}),
            serde_json::json!({"uncertain": uncertain}),
        ));
        let out = s.respond_from(status, origin, true);
        assert_eq!(
            out.last(),
            Some(&Action::PauseResponse),
            "{status}: the response is held"
        );
        assert_eq!(counts(&out), vec![Metric::Outcome(outcome)], "{status}");
        match (calls(&out).as_slice(), want) {
            ([StoreCall::Finalize { request, .. }], Want::Finalize) => {
                assert!(request.replayable);
                assert_eq!(request.response.status, status);
                assert_eq!(request.claim_id, CLAIM);
            }
            ([StoreCall::Release { request, .. }], Want::Release(release_as, cooldown_ms)) => {
                assert_eq!(request.release_as, release_as, "{status}");
                assert_eq!(request.cooldown_ms, cooldown_ms, "{status}");
            }
            (other, _) => panic!("{status}: unexpected calls {other:?}"),
        }
        assert_eq!(without_logs(s.ack()), vec![Action::ResumeResponse]);
        assert_eq!(s.held(), None, "settled: the outbox stopped renewing");
        assert_eq!(s.done(), vec![]);
    }
}

#[test]
fn a_recorded_response_is_buffered_filtered_and_held_until_finalized() {
    let mut s = to_upstream(config());
    assert_eq!(s.respond(201, false), vec![Action::PauseResponse]);
    assert_eq!(s.response_chunk(4, false), vec![Action::PauseResponse]);
    let out = s.response_body(br#"{"id":1}"#);
    assert_eq!(out.first(), Some(&Action::ReadResponseBody { size: 8 }));
    let [StoreCall::Finalize { request, .. }] = calls(&out).as_slice() else {
        panic!("{out:?}")
    };
    assert!(request.replayable);
    assert_eq!(request.response.body, br#"{"id":1}"#);
    assert_eq!(
        request.response.headers,
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("etag".to_owned(), "\"v1\"".to_owned()),
        ]
    );
    assert!(
        !out.contains(&Action::ResumeResponse),
        "held until the finalize answers (F7)"
    );
    assert_eq!(out.last(), Some(&Action::PauseResponse));
    assert_eq!(without_logs(s.ack()), vec![Action::ResumeResponse]);
    assert_eq!(s.held(), None);
}

#[test]
fn trailers_end_a_buffered_response_body() {
    let mut s = to_upstream(config());
    s.respond(200, false);
    s.response_chunk(3, false);
    s.host.response_body = b"abc".to_vec();
    let out = s.response(Callback::ResponseTrailers);
    assert_eq!(out.first(), Some(&Action::ReadResponseBody { size: 3 }));
    assert!(
        matches!(calls(&out).as_slice(), [StoreCall::Finalize { .. }]),
        "{out:?}"
    );
    assert_eq!(out.last(), Some(&Action::PauseResponse));
}

#[test]
fn a_response_over_the_cap_is_completed_not_replayable_and_streamed() {
    let config = config_with(
        serde_json::json!({}),
        serde_json::json!({"max_cacheable_response_bytes": 10}),
    );
    let mut s = to_upstream(Rc::clone(&config));
    s.respond(200, false);
    s.response_chunk(10, false);
    let out = s.response_chunk(11, false);
    let [StoreCall::Finalize { request, .. }] = calls(&out).as_slice() else {
        panic!("{out:?}")
    };
    assert!(!request.replayable);
    assert!(request.response.body.is_empty());
    assert_eq!(
        counts(&out),
        vec![Metric::Outcome(Outcome::CompletedUncacheable)]
    );
    assert_eq!(
        out.last(),
        Some(&Action::ContinueResponse),
        "the rest streams"
    );
    assert_eq!(s.response_chunk(100, false), vec![Action::ContinueResponse]);
    // The last chunk waits for the finalize answer so the callout survives.
    assert_eq!(s.response_chunk(5, true), vec![Action::PauseResponse]);
    assert_eq!(without_logs(s.ack()), vec![Action::ResumeResponse]);
    assert_eq!(s.held(), None);

    // Answered before the end: nothing to resume, the end flows.
    let mut s = to_upstream(Rc::clone(&config));
    s.respond(200, false);
    s.response_chunk(11, false);
    assert_eq!(without_logs(s.ack()), vec![]);
    assert_eq!(s.held(), None);
    assert_eq!(s.response_chunk(5, true), vec![Action::ContinueResponse]);

    // A body read whole that turns out larger than the cap (a host that
    // returned more than it announced): the machine itself, step by step.
    let mut m = Machine::new(Rc::clone(&config));
    let principal = identity::resolve(&config.identity, &keyed(), |_| None);
    m.on(Event::RequestHeaders {
        headers: keyed(),
        principal,
        previous_principal: None,
        end_of_stream: true,
    });
    m.on(Event::StoreAnswered {
        answer: Answer::ok(serde_json::to_vec(&won(3)).unwrap()),
        elapsed_ms: 1,
    });
    m.on(Event::ResponseHeadersRead {
        status: 200,
        headers: vec![h(":status", "200")],
        origin: ResponseOrigin::Upstream,
        end_of_stream: false,
    });
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 10,
            end_of_stream: true
        }),
        vec![Action::ReadResponseBody { size: 10 }, Action::PauseResponse]
    );
    let out = m.on(Event::ResponseBodyComplete { body: vec![0; 12] });
    let [StoreCall::Finalize { request, .. }] = calls(&out).as_slice() else {
        panic!("{out:?}")
    };
    assert!(!request.replayable);
}
