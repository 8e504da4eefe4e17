//! Every transition of the stream state machine, driven event by event.

use keyflight_protocol::problem::PROBLEM_CONTENT_TYPE;
use keyflight_protocol::wire::StoredResponse;
use proptest::prelude::*;

use super::*;
use crate::config::{StatusProfile, parse_plugin_config};
use crate::edge_cache::Entry;
use crate::status_matrix::ResponseOrigin;
use crate::store_call::parse_claim_answer;

const KEY: &str = "order-42";

/// A config with `root` and policy fields overridden. The edge cache is off
/// unless `root` configures it: most tests are about the store's answers, and
/// the edge-cache tests turn it on.
fn config_with(root: serde_json::Value, policy: serde_json::Value) -> Rc<Config> {
    let mut doc = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000},
        "edge_cache": {"max_bytes": 0},
        "identity": {"actor": [{"header": "x-actor"}], "principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"}}]
    });
    for (k, v) in root.as_object().unwrap() {
        doc[k] = v.clone();
    }
    for (k, v) in policy.as_object().unwrap() {
        doc["policies"][0][k] = v.clone();
    }
    Rc::new(parse_plugin_config(doc.to_string().as_bytes()).unwrap())
}

fn config() -> Rc<Config> {
    config_with(serde_json::json!({}), serde_json::json!({}))
}

fn h(name: &str, value: &str) -> (String, Vec<u8>) {
    (name.to_owned(), value.as_bytes().to_vec())
}

fn request(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let mut headers = vec![
        h(":method", method),
        h(":path", path),
        h(":authority", "api.example.com"),
        h("content-type", "application/json"),
    ];
    headers.extend(extra.iter().map(|(n, v)| h(n, v)));
    headers
}

fn keyed() -> Vec<(String, Vec<u8>)> {
    request(
        "POST",
        "/payments",
        &[("idempotency-key", KEY), ("x-user", "alice")],
    )
}

/// The principal source every test config names first for callers.
fn x_user() -> Rc<PrincipalSource> {
    Rc::new(PrincipalSource::Header("x-user".into()))
}

fn headers_event(headers: Vec<(String, Vec<u8>)>, principal: Option<&str>, eos: bool) -> Event {
    Event::RequestHeaders {
        headers,
        principal: match principal {
            Some(name) => identity::Lookup::Found {
                source: x_user(),
                name: name.to_owned(),
            },
            None => identity::Lookup::Absent,
        },
        end_of_stream: eos,
    }
}

/// The operator epoch the edge-cache tests' worker has heard.
const EPOCH: u64 = 5;

/// `on_http_response_headers` from the upstream, driven as the adapter does.
fn respond(m: &mut Machine, status: u16, eos: bool) -> Vec<Action> {
    respond_from(m, status, ResponseOrigin::Upstream, eos)
}

/// `on_http_response_headers` driven as the adapter does: the head is read
/// only when the machine asks, and the read's actions run in its place.
fn respond_from(m: &mut Machine, status: u16, origin: ResponseOrigin, eos: bool) -> Vec<Action> {
    let mut out = Vec::new();
    for action in m.on(Event::ResponseHeaders { end_of_stream: eos }) {
        match action {
            Action::ReadResponseHeaders { end_of_stream } => {
                out.extend(m.on(head(status, origin, end_of_stream)));
            }
            other => out.push(other),
        }
    }
    out
}

/// The response head the adapter reads for `ReadResponseHeaders`.
fn head(status: u16, origin: ResponseOrigin, eos: bool) -> Event {
    Event::ResponseHeadersRead {
        status,
        headers: vec![
            h(":status", &status.to_string()),
            h("content-type", "application/json"),
            h("set-cookie", "session=secret"),
            h("content-length", "12"),
            h("etag", "\"v1\""),
        ],
        origin,
        end_of_stream: eos,
    }
}

fn won(fence: i64) -> ClaimResponse {
    ClaimResponse::Won {
        claim_id: Uuid::from_u128(7),
        fence,
        how: WonHow::Claimed,
        lease_ms: 30_000,
    }
}

/// Drives a keyed POST with a body up to the claim call; returns the claim call.
fn to_claim(m: &mut Machine, body: &[u8]) -> StoreCall {
    let out = m.on(headers_event(keyed(), Some("alice"), false));
    assert_eq!(out, vec![Action::PauseRequest]);
    let out = m.on(Event::RequestBodyChunk {
        buffered_bytes: body.len(),
        end_of_stream: true,
    });
    assert_eq!(
        out,
        vec![
            Action::ReadRequestBody { size: body.len() },
            Action::PauseRequest
        ]
    );
    let out = m.on(Event::RequestBodyComplete {
        body: body.to_vec(),
    });
    match out.as_slice() {
        [Action::CallStore { call, .. }] => call.clone(),
        other => panic!("expected one claim call, got {other:?}"),
    }
}

/// Drives a request until it is forwarded upstream with a won lease.
fn to_upstream(config: Rc<Config>) -> Machine {
    let mut m = Machine::new(config);
    to_claim(&mut m, br#"{"amount": 10}"#);
    let out = m.on(Event::ClaimAnswered(Ok(won(3))));
    assert!(out.contains(&Action::ResumeRequest), "{out:?}");
    m
}

/// The claim id of [`won`].
const CLAIM: Uuid = Uuid::from_u128(7);

/// The outbox stops renewing [`CLAIM`]: the stream settled it.
fn stop_renewal() -> Action {
    Action::StopRenewal { claim_id: CLAIM }
}

/// The hand-offs to the outbox among `out`.
fn handoffs(out: &[Action]) -> Vec<Handoff> {
    out.iter()
        .filter_map(|a| match a {
            Action::HandOff(h) => Some(h.clone()),
            _ => None,
        })
        .collect()
}

fn reply(out: &[Action]) -> &LocalReply {
    out.iter()
        .find_map(|a| match a {
            Action::Reply(r) => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply in {out:?}"))
}

fn code(reply: &LocalReply) -> String {
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    body["code"].as_str().unwrap().to_owned()
}

fn header<'a>(reply: &'a LocalReply, name: &str) -> Option<&'a str> {
    reply
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn calls(out: &[Action]) -> Vec<&StoreCall> {
    out.iter()
        .filter_map(|a| match a {
            Action::CallStore { call, .. } => Some(call),
            _ => None,
        })
        .collect()
}

/// The one store call among `out`.
fn single_call(out: &[Action]) -> StoreCall {
    match calls(out).as_slice() {
        [call] => (*call).clone(),
        other => panic!("expected one store call, got {other:?}"),
    }
}

fn counts(out: &[Action]) -> Vec<Metric> {
    out.iter()
        .filter_map(|a| match a {
            Action::Count(m) => Some(*m),
            _ => None,
        })
        .collect()
}

// ----- requests that are not guarded ---------------------------------------

#[test]
fn a_request_matching_no_policy_passes_untouched() {
    let mut m = Machine::new(config());
    let out = m.on(headers_event(
        request("POST", "/other", &[("idempotency-key", KEY)]),
        Some("alice"),
        false,
    ));
    assert_eq!(out, vec![Action::ContinueRequest]);
    let out = m.on(Event::RequestBodyChunk {
        buffered_bytes: 10,
        end_of_stream: true,
    });
    assert_eq!(out, vec![Action::ContinueRequest]);
    assert_eq!(
        m.on(Event::ResponseHeaders {
            end_of_stream: true
        }),
        vec![Action::ContinueResponse],
        "an unguarded response is not read"
    );
}

#[test]
fn only_a_response_to_record_is_read() {
    let mut m = to_upstream(config());
    assert_eq!(
        m.on(Event::ResponseHeaders {
            end_of_stream: true
        }),
        vec![Action::ReadResponseHeaders {
            end_of_stream: true
        }],
        "the read's follow-up carries the verdict"
    );
    let out = m.on(head(201, ResponseOrigin::Upstream, true));
    assert_eq!(calls(&out).len(), 1, "recorded: {out:?}");
    assert_eq!(out.last(), Some(&Action::PauseResponse));
}

#[test]
fn a_guarded_route_without_a_key_passes_unguarded() {
    let mut m = Machine::new(config());
    let out = m.on(headers_event(
        request("POST", "/payments", &[]),
        Some("alice"),
        false,
    ));
    assert_eq!(
        out,
        vec![
            Action::Count(Metric::Outcome(Outcome::Unguarded)),
            Action::ContinueRequest
        ]
    );
    assert_eq!(respond(&mut m, 500, true), vec![Action::ContinueResponse]);
}

#[test]
fn a_client_sent_fence_is_always_removed() {
    let mut m = Machine::new(config());
    let out = m.on(headers_event(
        request("GET", "/", &[("idempotency-fence", "999")]),
        None,
        true,
    ));
    assert_eq!(
        out,
        vec![
            Action::SetRequestHeader {
                name: FENCE_HEADER.into(),
                value: None
            },
            Action::ContinueRequest
        ]
    );
}

// ----- refusals before the claim -------------------------------------------

#[test]
fn key_errors_are_400_and_never_claim() {
    let long = "k".repeat(256);
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("idempotency-key", "")], "idempotency_key_invalid"),
        (
            vec![("idempotency-key", "a"), ("idempotency-key", "b")],
            "idempotency_key_invalid",
        ),
        (
            vec![("idempotency-key", long.as_str())],
            "idempotency_key_invalid",
        ),
        (
            vec![("idempotency-key", "caf\u{e9}")],
            "idempotency_key_invalid",
        ),
        (
            vec![("idempotency-key", "\"unterminated")],
            "idempotency_key_invalid",
        ),
    ];
    for (extra, want) in cases {
        let mut m = Machine::new(config());
        let out = m.on(headers_event(
            request("POST", "/payments", &extra),
            Some("alice"),
            false,
        ));
        let r = reply(&out);
        assert_eq!((r.status, code(r).as_str()), (400, want), "{extra:?}");
        assert_eq!(header(r, "content-type"), Some(PROBLEM_CONTENT_TYPE));
        assert_eq!(out.last(), Some(&Action::PauseRequest));
        assert!(counts(&out).contains(&Metric::Outcome(Outcome::RejectedInvalid)));
        let out = m.on(Event::RequestBodyChunk {
            buffered_bytes: 3,
            end_of_stream: true,
        });
        assert_eq!(out, vec![Action::PauseRequest]);
    }
}

#[test]
fn require_key_refuses_a_request_without_one() {
    let mut m = Machine::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"require_key": true}),
    ));
    let out = m.on(headers_event(
        request("POST", "/payments", &[]),
        Some("alice"),
        true,
    ));
    let r = reply(&out);
    assert_eq!(
        (r.status, code(r).as_str()),
        (400, "idempotency_key_required")
    );
}

#[test]
fn a_keyed_request_without_principal_is_401() {
    let mut m = Machine::new(config());
    let out = m.on(headers_event(
        request("POST", "/payments", &[("idempotency-key", KEY)]),
        None,
        true,
    ));
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (401, "principal_required"));
    assert!(calls(&out).is_empty());
}

#[test]
fn anonymous_shared_claims_in_one_shared_scope() {
    let config = config_with(
        serde_json::json!({}),
        serde_json::json!({"anonymous": "shared"}),
    );
    let scope_of = |principal: Option<&str>| {
        let mut m = Machine::new(Rc::clone(&config));
        let out = m.on(headers_event(
            request("POST", "/payments", &[("idempotency-key", KEY)]),
            principal,
            true,
        ));
        match calls(&out).as_slice() {
            [StoreCall::Claim { scope, .. }] => *scope,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(scope_of(None), scope_of(None));
    assert_ne!(scope_of(None), scope_of(Some("alice")));
    assert_ne!(scope_of(Some("bob")), scope_of(Some("alice")));
}

#[test]
fn body_over_the_cap_is_413() {
    let config = config_with(
        serde_json::json!({}),
        serde_json::json!({"max_request_body_bytes": 8}),
    );
    // Declared length, up front.
    let mut m = Machine::new(Rc::clone(&config));
    let mut headers = keyed();
    headers.push(h("content-length", "9"));
    let out = m.on(headers_event(headers, Some("alice"), false));
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (413, "payload_too_large"));
    // Counted while buffering.
    let mut m = Machine::new(Rc::clone(&config));
    m.on(headers_event(keyed(), Some("alice"), false));
    assert_eq!(
        m.on(Event::RequestBodyChunk {
            buffered_bytes: 8,
            end_of_stream: false
        }),
        vec![Action::PauseRequest]
    );
    let out = m.on(Event::RequestBodyChunk {
        buffered_bytes: 9,
        end_of_stream: false,
    });
    assert_eq!(reply(&out).status, 413);
    assert_eq!(out.last(), Some(&Action::PauseRequest));
    // Exactly at the cap is fine.
    let mut m = Machine::new(config);
    m.on(headers_event(keyed(), Some("alice"), false));
    m.on(Event::RequestBodyChunk {
        buffered_bytes: 8,
        end_of_stream: true,
    });
    let out = m.on(Event::RequestBodyComplete {
        body: vec![b'x'; 8],
    });
    assert_eq!(calls(&out).len(), 1);
}

// ----- the claim ------------------------------------------------------------

#[test]
fn the_claim_carries_fingerprint_lease_wait_and_retention() {
    let mut m = Machine::new(config());
    m.on(headers_event(keyed(), Some("alice"), false));
    m.on(Event::RequestBodyChunk {
        buffered_bytes: 2,
        end_of_stream: true,
    });
    let out = m.on(Event::RequestBodyComplete {
        body: b"{}".to_vec(),
    });
    let [Action::CallStore { call, timeout }] = out.as_slice() else {
        panic!("{out:?}")
    };
    assert_eq!(*timeout, Duration::from_millis(6000));
    let StoreCall::Claim { request, .. } = call else {
        panic!("{call:?}")
    };
    assert_eq!(request.lease_ms, 30_000);
    assert_eq!(request.wait_ms, Some(5000));
    assert_eq!(request.retention_s, Some(86_400));
    // The request stays held while the claim is in flight.
    assert_eq!(m.on(Event::RequestTrailers), vec![Action::PauseRequest]);
}

#[test]
fn the_fingerprint_depends_on_the_body_and_scope_on_the_key() {
    let claim = |body: &[u8]| match to_claim(&mut Machine::new(config()), body) {
        StoreCall::Claim { scope, request } => (scope, request.fingerprint),
        other => panic!("{other:?}"),
    };
    let (scope_a, fp_a) = claim(br#"{"amount":10}"#);
    let (scope_b, fp_b) = claim(br#"{"amount":11}"#);
    let (_, fp_c) = claim(br#"{ "amount" : 10 }"#);
    assert_eq!(scope_a, scope_b);
    assert_ne!(fp_a, fp_b);
    assert_eq!(fp_a, fp_c, "JSON bodies are canonicalized (K4)");
}

#[test]
fn a_bodyless_request_claims_from_the_headers_callback() {
    let mut m = Machine::new(config());
    let out = m.on(headers_event(keyed(), Some("alice"), true));
    assert_eq!(calls(&out).len(), 1);
    assert_eq!(out.last(), Some(&Action::PauseRequest));
}

#[test]
fn trailers_end_a_buffered_request_body() {
    let mut m = Machine::new(config());
    m.on(headers_event(keyed(), Some("alice"), false));
    m.on(Event::RequestBodyChunk {
        buffered_bytes: 5,
        end_of_stream: false,
    });
    assert_eq!(
        m.on(Event::RequestTrailers),
        vec![Action::ReadRequestBody { size: 5 }, Action::PauseRequest]
    );
}

#[test]
fn won_forwards_with_the_fence_and_starts_renewal() {
    for (how, event) in [
        (WonHow::Claimed, EventKind::Claimed),
        (WonHow::RecoveredTtl, EventKind::RecoveredTtl),
        (WonHow::RecoveredAbandoned, EventKind::RecoveredAbandoned),
    ] {
        let mut m = Machine::new(config());
        let StoreCall::Claim { scope, .. } = to_claim(&mut m, b"{}") else {
            panic!()
        };
        let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Won {
            claim_id: Uuid::from_u128(9),
            fence: 41,
            how,
            lease_ms: 30_000,
        })));
        assert_eq!(
            out,
            vec![
                Action::Count(Metric::Event(event)),
                Action::StartRenewal(Lease {
                    scope,
                    claim_id: Uuid::from_u128(9),
                    lease: Duration::from_secs(30),
                    interval: Duration::from_secs(10),
                }),
                Action::SetRequestHeader {
                    name: "idempotency-fence".into(),
                    value: Some("41".into())
                },
                // F8: the recorded answer must decode for every client.
                Action::SetRequestHeader {
                    name: "accept-encoding".into(),
                    value: Some("identity".into())
                },
                Action::SetRequestHeader {
                    name: "x-envoy-max-retries".into(),
                    value: Some("0".into())
                },
                Action::ResumeRequest,
            ]
        );
    }
}

/// The request header edits a won claim makes before it resumes the request.
fn forwarded_header_edits(config: Rc<Config>) -> Vec<(String, Option<String>)> {
    let mut m = Machine::new(config);
    to_claim(&mut m, b"{}");
    m.on(Event::ClaimAnswered(Ok(won(3))))
        .into_iter()
        .filter_map(|action| match action {
            Action::SetRequestHeader { name, value }
                if name != FENCE_HEADER && name != encoding::ACCEPT_ENCODING =>
            {
                Some((name, value))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn by_default_the_router_may_not_retry_a_forwarded_request() {
    assert_eq!(
        forwarded_header_edits(config()),
        vec![("x-envoy-max-retries".to_owned(), Some("0".to_owned()))]
    );
}

#[test]
fn router_retries_route_keeps_the_route_policy_and_drops_caller_retry_headers() {
    let edits = forwarded_header_edits(config_with(
        serde_json::json!({}),
        serde_json::json!({"router_retries": "route"}),
    ));
    assert_eq!(
        edits,
        vec![
            ("x-envoy-retry-on".to_owned(), None),
            ("x-envoy-retry-grpc-on".to_owned(), None),
            ("x-envoy-hedge-on-per-try-timeout".to_owned(), None),
        ]
    );
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
    let mut m = Machine::new(config());
    to_claim(&mut m, b"{}");
    let out = m.on(Event::ClaimAnswered(Ok(gzip_record())));
    let r = reply(&out);
    assert_eq!(
        (r.status, code(r).as_str()),
        (409, "response_not_replayable")
    );
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::NotReplayable)]);

    // One that accepts gzip gets the body with its label.
    let mut m = Machine::new(config());
    let mut headers = keyed();
    headers.push(h("accept-encoding", "br, gzip;q=0.8"));
    m.on(headers_event(headers, Some("alice"), true));
    let out = m.on(Event::ClaimAnswered(Ok(gzip_record())));
    let r = reply(&out);
    assert_eq!(r.status, 201);
    assert_eq!(header(r, "content-encoding"), Some("gzip"));
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Replay)]);
}

#[test]
fn a_principal_source_that_names_no_single_principal_is_400() {
    let mut m = Machine::new(config());
    let out = m.on(Event::RequestHeaders {
        headers: keyed(),
        principal: identity::Lookup::Refused(keyflight_protocol::PrincipalError::Repeated(
            "header:x-user".into(),
        )),
        end_of_stream: true,
    });
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (400, "principal_ambiguous"));
    assert!(calls(&out).is_empty());
    assert_eq!(
        counts(&out),
        vec![Metric::Outcome(Outcome::RejectedInvalid)]
    );
}

#[test]
fn respelled_paths_are_guarded_like_the_policy_path() {
    for path in ["//payments", "/x/../payments", "/%70ayments"] {
        let mut m = Machine::new(config());
        let headers = request("POST", path, &[("x-user", "alice")]);
        let out = m.on(headers_event(headers, Some("alice"), true));
        // Guarded: a keyless request is counted as such, not passed silently.
        assert_eq!(
            counts(&out),
            vec![Metric::Outcome(Outcome::Unguarded)],
            "{path}"
        );
        let config = config_with(
            serde_json::json!({}),
            serde_json::json!({"require_key": true}),
        );
        let mut m = Machine::new(config);
        let headers = request("POST", path, &[("x-user", "alice")]);
        let out = m.on(headers_event(headers, Some("alice"), true));
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str()),
            (400, "idempotency_key_required"),
            "{path}"
        );
    }
}

#[test]
fn completed_replays_the_record_with_allowlisted_headers() {
    let mut m = Machine::new(config());
    to_claim(&mut m, b"{}");
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
    let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Completed {
        response: stored,
    })));
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
    assert_eq!(respond(&mut m, 201, false), vec![Action::ContinueResponse]);
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 8,
            end_of_stream: true
        }),
        vec![Action::ContinueResponse]
    );
    assert_eq!(m.on(Event::StreamDone), vec![]);
}

#[test]
fn a_malformed_record_is_journal_unavailable() {
    let mut m = Machine::new(config());
    to_claim(&mut m, b"{}");
    let broken =
        br#"{"outcome":"completed","response":{"status":200,"headers":[],"body_b64":"***"}}"#;
    let out = m.on(Event::ClaimAnswered(parse_claim_answer(Some(200), broken)));
    assert_eq!(code(reply(&out)), "journal_unavailable");
    // Never forwarded, not even under `failure_mode: open`: the operation ran.
    let mut m = Machine::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"failure_mode": "open"}),
    ));
    to_claim(&mut m, b"{}");
    let out = m.on(Event::ClaimAnswered(parse_claim_answer(Some(200), broken)));
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
        (ClaimResponse::Unknown, Ietf, 409, "operation_unknown", None),
    ];
    for (answer, profile, status, want, retry_after) in cases {
        let profile_name = match profile {
            Keyflight => "keyflight",
            Ietf => "ietf",
        };
        let mut m = Machine::new(config_with(
            serde_json::json!({"status_profile": profile_name}),
            serde_json::json!({}),
        ));
        to_claim(&mut m, b"{}");
        let out = m.on(Event::ClaimAnswered(Ok(answer.clone())));
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str()),
            (status, want),
            "{answer:?} {profile:?}"
        );
        assert_eq!(header(r, "retry-after"), retry_after, "{answer:?}");
        assert!(!out.contains(&Action::ResumeRequest));
        assert_eq!(
            respond(&mut m, status, true),
            vec![Action::ContinueResponse]
        );
    }
}

#[test]
fn a_cooldown_counts_the_event_and_the_outcome() {
    let mut m = Machine::new(config());
    to_claim(&mut m, b"{}");
    let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Cooldown {
        retry_after_s: 2,
    })));
    assert_eq!(
        counts(&out),
        vec![
            Metric::Event(EventKind::RetryableCooldown),
            Metric::Outcome(Outcome::Failed)
        ]
    );
}

#[test]
fn store_failure_fails_closed_by_default() {
    for error in [
        CallError::Dispatch,
        CallError::NoAnswer,
        CallError::Status(503),
        CallError::Malformed,
    ] {
        let mut m = Machine::new(config());
        to_claim(&mut m, b"{}");
        let out = m.on(Event::ClaimAnswered(Err(error)));
        let r = reply(&out);
        assert_eq!((r.status, code(r).as_str()), (503, "journal_unavailable"));
        assert_eq!(header(r, "retry-after"), Some("1"));
        assert!(
            !out.contains(&Action::ResumeRequest),
            "{error:?}: upstream must not be called"
        );
        assert_eq!(
            counts(&out),
            vec![Metric::Outcome(Outcome::JournalUnavailable)]
        );
    }
}

#[test]
fn store_failure_with_failure_mode_open_passes_unguarded() {
    let mut m = Machine::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"failure_mode": "open"}),
    ));
    to_claim(&mut m, b"{}");
    let out = m.on(Event::ClaimAnswered(Err(CallError::NoAnswer)));
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
    assert_eq!(respond(&mut m, 200, true), vec![Action::ContinueResponse]);
}

// ----- the upstream's answer ------------------------------------------------

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
    ];
    for (status, origin, uncertain, want, outcome) in cases {
        let mut m = to_upstream(config_with(
            serde_json::json!({}),
            serde_json::json!({"uncertain": uncertain}),
        ));
        let out = respond_from(&mut m, status, origin, true);
        assert_eq!(
            out.last(),
            Some(&Action::PauseResponse),
            "{status}: the response is held"
        );
        assert_eq!(counts(&out), vec![Metric::Outcome(outcome)], "{status}");
        let answered = match (calls(&out).as_slice(), want) {
            ([StoreCall::Finalize { request, .. }], Want::Finalize) => {
                assert!(request.replayable);
                assert_eq!(request.response.status, status);
                assert_eq!(request.claim_id, Uuid::from_u128(7));
                Event::FinalizeAnswered(Ok(()))
            }
            ([StoreCall::Release { request, .. }], Want::Release(release_as, cooldown_ms)) => {
                assert_eq!(request.release_as, release_as, "{status}");
                assert_eq!(request.cooldown_ms, cooldown_ms, "{status}");
                Event::ReleaseAnswered(Ok(()))
            }
            (other, _) => panic!("{status}: unexpected calls {other:?}"),
        };
        assert_eq!(m.on(answered), vec![stop_renewal(), Action::ResumeResponse]);
        assert_eq!(m.on(Event::StreamDone), vec![]);
    }
}

#[test]
fn a_recorded_response_is_buffered_filtered_and_held_until_finalized() {
    let mut m = to_upstream(config());
    assert_eq!(respond(&mut m, 201, false), vec![Action::PauseResponse]);
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 4,
            end_of_stream: false
        }),
        vec![Action::PauseResponse]
    );
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 8,
            end_of_stream: true
        }),
        vec![Action::ReadResponseBody { size: 8 }, Action::PauseResponse]
    );
    let out = m.on(Event::ResponseBodyComplete {
        body: br#"{"id":1}"#.to_vec(),
    });
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
    assert_eq!(
        m.on(Event::FinalizeAnswered(Ok(()))),
        vec![stop_renewal(), Action::ResumeResponse]
    );
}

#[test]
fn trailers_end_a_buffered_response_body() {
    let mut m = to_upstream(config());
    respond(&mut m, 200, false);
    m.on(Event::ResponseBodyChunk {
        buffered_bytes: 3,
        end_of_stream: false,
    });
    assert_eq!(
        m.on(Event::ResponseTrailers),
        vec![Action::ReadResponseBody { size: 3 }, Action::PauseResponse]
    );
}

#[test]
fn a_failed_settle_call_delivers_the_response_and_hands_the_claim_to_the_outbox() {
    for (error, event) in [
        (CallError::NoAnswer, EventKind::FinalizeError),
        (CallError::Status(503), EventKind::FinalizeError),
        (CallError::Status(413), EventKind::FinalizeError),
    ] {
        let mut m = to_upstream(config());
        let out = respond(&mut m, 200, true);
        let call = single_call(&out);
        let out = m.on(Event::FinalizeAnswered(Err(error)));
        assert_eq!(counts(&out), vec![Metric::Event(event)]);
        assert_eq!(
            handoffs(&out),
            vec![Handoff {
                claim_id: CLAIM,
                call,
                last_error: Some(error),
                budget: Duration::from_secs(120),
            }],
            "the outbox gets the same call and what became of it"
        );
        assert!(
            !out.iter().any(|a| matches!(a, Action::StopRenewal { .. })),
            "the outbox keeps renewing: {out:?}"
        );
        assert_eq!(out.last(), Some(&Action::ResumeResponse), "not held longer");
        assert!(
            out.iter().any(|a| matches!(a, Action::Log { message, .. }
                if message.contains("fence 3:") && message.contains("outbox"))),
            "the hand-off is logged with the fence the upstream saw: {out:?}"
        );
        assert_eq!(m.on(Event::StreamDone), vec![], "handed off once");
    }
    let mut m = to_upstream(config());
    respond(&mut m, 500, true);
    let out = m.on(Event::ReleaseAnswered(Err(CallError::NoAnswer)));
    assert_eq!(counts(&out), vec![Metric::Event(EventKind::ReleaseError)]);
    let [handoff] = handoffs(&out).try_into().unwrap();
    assert!(matches!(
        handoff.call,
        StoreCall::Release { ref request, .. } if request.release_as == ReleaseAs::Cooldown
    ));
    assert!(out.contains(&Action::ResumeResponse));
}

#[test]
fn a_stolen_lease_is_reported_then_renewal_stops_and_nothing_is_handed_off() {
    // The outbox counts `lease_stolen` unless a renew already did; it needs
    // to hear of the theft before the claim is dropped.
    let mut m = to_upstream(config());
    respond(&mut m, 200, true);
    let out = m.on(Event::FinalizeAnswered(Err(CallError::LeaseLost)));
    let lost = out
        .iter()
        .position(|a| *a == Action::LeaseLost { claim_id: CLAIM })
        .unwrap();
    let stop = out.iter().position(|a| *a == stop_renewal()).unwrap();
    assert!(lost < stop, "{out:?}");
    assert!(counts(&out).is_empty(), "{out:?}");
    assert!(handoffs(&out).is_empty(), "{out:?}");
    assert!(out.contains(&Action::ResumeResponse));
}

#[test]
fn a_response_over_the_cap_is_completed_not_replayable_and_streamed() {
    let config = config_with(
        serde_json::json!({}),
        serde_json::json!({"max_cacheable_response_bytes": 10}),
    );
    let mut m = to_upstream(Rc::clone(&config));
    respond(&mut m, 200, false);
    m.on(Event::ResponseBodyChunk {
        buffered_bytes: 10,
        end_of_stream: false,
    });
    let out = m.on(Event::ResponseBodyChunk {
        buffered_bytes: 11,
        end_of_stream: false,
    });
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
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 100,
            end_of_stream: false
        }),
        vec![Action::ContinueResponse]
    );
    // The last chunk waits for the finalize answer so the callout survives.
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 5,
            end_of_stream: true
        }),
        vec![Action::PauseResponse]
    );
    assert_eq!(
        m.on(Event::FinalizeAnswered(Ok(()))),
        vec![stop_renewal(), Action::ResumeResponse]
    );

    // Answered before the end: nothing to resume, the end flows.
    let mut m = to_upstream(Rc::clone(&config));
    respond(&mut m, 200, false);
    m.on(Event::ResponseBodyChunk {
        buffered_bytes: 11,
        end_of_stream: false,
    });
    assert_eq!(m.on(Event::FinalizeAnswered(Ok(()))), vec![stop_renewal()]);
    assert_eq!(
        m.on(Event::ResponseBodyChunk {
            buffered_bytes: 5,
            end_of_stream: true
        }),
        vec![Action::ContinueResponse]
    );

    // A body read whole that turns out larger than the cap.
    let mut m = to_upstream(config);
    respond(&mut m, 200, false);
    m.on(Event::ResponseBodyChunk {
        buffered_bytes: 10,
        end_of_stream: true,
    });
    let out = m.on(Event::ResponseBodyComplete { body: vec![0; 12] });
    let [StoreCall::Finalize { request, .. }] = calls(&out).as_slice() else {
        panic!("{out:?}")
    };
    assert!(!request.replayable);
}

#[test]
fn a_caller_gone_while_the_upstream_runs_hands_off_a_release_per_uncertain() {
    for (uncertain, release_as, outcome) in [
        ("retry", ReleaseAs::Cooldown, Outcome::Failed),
        ("hold", ReleaseAs::Unknown, Outcome::OperationUnknown),
    ] {
        let mut m = to_upstream(config_with(
            serde_json::json!({}),
            serde_json::json!({"uncertain": uncertain, "record_retry_budget_ms": 5000}),
        ));
        let out = m.on(Event::StreamDone);
        assert_eq!(
            counts(&out),
            vec![
                Metric::Outcome(outcome),
                Metric::Event(EventKind::CallerGone)
            ]
        );
        let [handoff] = handoffs(&out).try_into().unwrap();
        assert_eq!(handoff.claim_id, CLAIM);
        assert_eq!(handoff.last_error, None, "no attempt was made yet");
        assert_eq!(handoff.budget, Duration::from_secs(5));
        let StoreCall::Release { request, .. } = handoff.call else {
            panic!("{uncertain}: a release, got {:?}", handoff.call)
        };
        assert_eq!(request.release_as, release_as, "{uncertain}");
        assert_eq!(request.claim_id, CLAIM);
        assert!(!out.iter().any(|a| matches!(a, Action::StopRenewal { .. })));
        assert_eq!(m.on(Event::StreamDone), vec![], "once");
        assert_eq!(m.on(Event::FinalizeAnswered(Ok(()))), vec![]);
    }
}

#[test]
fn a_caller_gone_while_the_answer_is_read_records_it_completed_not_replayable() {
    let mut m = to_upstream(config());
    respond(&mut m, 201, false);
    m.on(Event::ResponseBodyChunk {
        buffered_bytes: 4,
        end_of_stream: false,
    });
    let out = m.on(Event::StreamDone);
    assert_eq!(
        counts(&out),
        vec![
            Metric::Outcome(Outcome::CompletedUncacheable),
            Metric::Event(EventKind::CallerGone)
        ]
    );
    let [handoff] = handoffs(&out).try_into().unwrap();
    let StoreCall::Finalize { request, .. } = handoff.call else {
        panic!("a finalize, got {:?}", handoff.call)
    };
    assert!(!request.replayable, "the body was never read whole");
    assert_eq!(request.response.status, 201);
    assert!(request.response.body.is_empty());
}

#[test]
fn a_stream_ending_with_its_settle_call_in_flight_hands_that_call_off() {
    let mut m = to_upstream(config());
    let out = respond(&mut m, 201, true);
    let call = single_call(&out);
    let out = m.on(Event::StreamDone);
    assert_eq!(
        handoffs(&out),
        vec![Handoff {
            claim_id: CLAIM,
            call,
            last_error: None,
            budget: Duration::from_secs(120),
        }]
    );
    assert!(
        counts(&out).is_empty(),
        "counted when it was recorded: {out:?}"
    );
    assert_eq!(
        m.on(Event::FinalizeAnswered(Ok(()))),
        vec![],
        "a late answer (never delivered by the host) changes nothing"
    );
}

#[test]
fn a_stream_ending_after_its_record_landed_hands_nothing_off() {
    let mut m = to_upstream(config());
    respond(&mut m, 201, true);
    m.on(Event::FinalizeAnswered(Ok(())));
    assert_eq!(m.on(Event::StreamDone), vec![]);
}

#[test]
fn late_or_unexpected_answers_are_ignored() {
    let mut m = Machine::new(config());
    assert!(m.on(Event::ClaimAnswered(Ok(won(1)))).is_empty());
    let mut m = to_upstream(config());
    assert!(m.on(Event::ClaimAnswered(Ok(won(1)))).is_empty());
    respond(&mut m, 200, true);
    assert!(
        m.on(Event::ReleaseAnswered(Ok(()))).is_empty(),
        "a finalize is pending, not a release"
    );
}

// ----- dry run --------------------------------------------------------------

#[test]
fn dry_run_never_blocks_or_replays_but_counts() {
    let dry = || {
        config_with(
            serde_json::json!({"mode": "dry_run"}),
            serde_json::json!({}),
        )
    };
    // A bad key passes.
    let mut m = Machine::new(dry());
    let out = m.on(headers_event(
        request("POST", "/payments", &[("idempotency-key", "")]),
        Some("alice"),
        false,
    ));
    assert_eq!(
        out,
        vec![
            Action::Count(Metric::DryRun(Outcome::RejectedInvalid)),
            Action::ContinueRequest
        ]
    );
    // A replay or refusal resumes the request instead.
    for answer in [
        ClaimResponse::Conflict,
        ClaimResponse::Completed {
            response: StoredResponse::new(200, vec![], b"x"),
        },
    ] {
        let mut m = Machine::new(dry());
        to_claim(&mut m, b"{}");
        let out = m.on(Event::ClaimAnswered(Ok(answer)));
        assert!(out.contains(&Action::ResumeRequest));
        assert!(!out.iter().any(|a| matches!(a, Action::Reply(_))));
        assert_eq!(respond(&mut m, 200, true), vec![Action::ContinueResponse]);
    }
    // Store down: passes.
    let mut m = Machine::new(dry());
    to_claim(&mut m, b"{}");
    let out = m.on(Event::ClaimAnswered(Err(CallError::NoAnswer)));
    assert!(out.contains(&Action::ResumeRequest));
    assert!(counts(&out).contains(&Metric::DryRun(Outcome::JournalUnavailable)));
    // A winner records, without telling the upstream a fence.
    let mut m = Machine::new(dry());
    to_claim(&mut m, b"{}");
    let out = m.on(Event::ClaimAnswered(Ok(won(5))));
    assert!(out.contains(&Action::ResumeRequest));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::SetRequestHeader { .. }))
    );
    let out = respond(&mut m, 200, true);
    assert_eq!(counts(&out), vec![Metric::DryRun(Outcome::WonCompleted)]);
    assert_eq!(calls(&out).len(), 1);
}

// ----- edge cache (F9) ------------------------------------------------------

fn cached(root: serde_json::Value, policy: serde_json::Value) -> Rc<Config> {
    let mut root = root;
    root["edge_cache"] =
        serde_json::json!({"max_bytes": 65536, "max_entry_bytes": 4096, "ttl_s": 60});
    config_with(root, policy)
}

/// Drives a keyed POST with `body` to the edge-cache read; returns the slot key.
fn to_cache_lookup(m: &mut Machine, body: &[u8]) -> String {
    m.on(headers_event(keyed(), Some("alice"), false));
    m.on(Event::RequestBodyChunk {
        buffered_bytes: body.len(),
        end_of_stream: true,
    });
    let out = m.on(Event::RequestBodyComplete {
        body: body.to_vec(),
    });
    match out.as_slice() {
        [Action::ReadEdgeCache { key }] => key.clone(),
        other => panic!("expected one edge-cache read, got {other:?}"),
    }
}

/// The claim a miss would make, for the scope and fingerprint of `body`.
fn claim_of(config: Rc<Config>, body: &[u8]) -> (Digest, Digest) {
    let mut m = Machine::new(config);
    let key = to_cache_lookup(&mut m, body);
    let out = m.on(Event::EdgeCacheRead {
        slot: None,
        now_ms: 0,
        epoch: Some(EPOCH),
    });
    assert!(key.starts_with("keyflight.edge_cache.v1."));
    match calls(&out).as_slice() {
        [StoreCall::Claim { scope, request }] => (*scope, request.fingerprint),
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn slot_for(scope: Digest, fingerprint: Digest, stored_at_ms: u64) -> Vec<u8> {
    Entry {
        scope,
        fingerprint,
        epoch: EPOCH,
        ttl: Duration::from_secs(60),
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

#[test]
fn an_edge_cache_hit_replays_without_a_store_call() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let body = br#"{"amount": 10}"#;
    let (scope, fingerprint) = claim_of(Rc::clone(&config), body);
    let mut m = Machine::new(config);
    to_cache_lookup(&mut m, body);
    let out = m.on(Event::EdgeCacheRead {
        slot: Some(slot_for(scope, fingerprint, 1_000)),
        now_ms: 2_000,
        epoch: Some(EPOCH),
    });
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
        m.on(Event::ResponseHeaders {
            end_of_stream: false
        }),
        vec![Action::ContinueResponse]
    );
}

#[test]
fn an_edge_cache_record_with_another_fingerprint_is_a_conflict() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let (scope, _) = claim_of(Rc::clone(&config), b"{}");
    let mut m = Machine::new(config);
    to_cache_lookup(&mut m, br#"{"amount": 99}"#);
    let out = m.on(Event::EdgeCacheRead {
        slot: Some(slot_for(scope, Digest([9; 32]), 0)),
        now_ms: 10,
        epoch: Some(EPOCH),
    });
    assert!(calls(&out).is_empty());
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Conflict)]);
    assert_eq!(reply(&out).status, 409);
    assert_eq!(code(reply(&out)), "idempotency_conflict");
}

#[test]
fn expired_foreign_or_colliding_slots_claim_as_usual() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let body = b"{}";
    let (scope, fingerprint) = claim_of(Rc::clone(&config), body);
    let mut other_scope = scope;
    other_scope.0[31] ^= 1;
    for (slot, now_ms) in [
        (Some(slot_for(scope, fingerprint, 0)), 60_000),
        (Some(slot_for(other_scope, fingerprint, 0)), 10),
        (Some(slot_for(other_scope, Digest([9; 32]), 0)), 10),
        (Some(b"garbage".to_vec()), 10),
        (None, 10),
    ] {
        let mut m = Machine::new(Rc::clone(&config));
        to_cache_lookup(&mut m, body);
        let out = m.on(Event::EdgeCacheRead {
            slot,
            now_ms,
            epoch: Some(EPOCH),
        });
        assert_eq!(calls(&out).len(), 1, "{out:?}");
        assert!(counts(&out).is_empty());
        assert_eq!(out.last(), Some(&Action::PauseRequest));
    }
}

#[test]
fn a_durable_record_fills_the_edge_cache_and_nothing_else_does() {
    let config = cached(serde_json::json!({}), serde_json::json!({"retention_s": 5}));
    // The winner: cached only once the store acknowledged the record.
    let mut m = Machine::new(Rc::clone(&config));
    let key = to_cache_lookup(&mut m, b"{}");
    m.on(Event::EdgeCacheRead {
        slot: None,
        now_ms: 0,
        epoch: Some(EPOCH),
    });
    m.on(Event::ClaimAnswered(Ok(won(3))));
    let out = respond(&mut m, 201, true);
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
    let out = m.on(Event::FinalizeAnswered(Ok(())));
    let written = out
        .iter()
        .find_map(|a| match a {
            Action::WriteEdgeCache { key: k, entry } => Some((k.clone(), entry.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(written.0, key);
    assert_eq!(
        written.1.ttl,
        Duration::from_secs(5),
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
    // A failed or stolen finalize, a release, an uncacheable success: nothing.
    for (status, answer) in [
        (201, Err(CallError::LeaseLost)),
        (201, Err(CallError::NoAnswer)),
    ] {
        let mut m = Machine::new(Rc::clone(&config));
        to_cache_lookup(&mut m, b"{}");
        m.on(Event::EdgeCacheRead {
            slot: None,
            now_ms: 0,
            epoch: Some(EPOCH),
        });
        m.on(Event::ClaimAnswered(Ok(won(3))));
        respond(&mut m, status, true);
        let out = m.on(Event::FinalizeAnswered(answer));
        assert!(
            !out.iter()
                .any(|a| matches!(a, Action::WriteEdgeCache { .. })),
            "{out:?}"
        );
    }
    // A follower's completed answer: cached and replayed.
    let mut m = Machine::new(Rc::clone(&config));
    to_cache_lookup(&mut m, b"{}");
    m.on(Event::EdgeCacheRead {
        slot: None,
        now_ms: 0,
        epoch: Some(EPOCH),
    });
    let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Completed {
        response: StoredResponse::new(201, vec![], b"{}"),
    })));
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
    assert_eq!(counts(&out), vec![Metric::Outcome(Outcome::Replay)]);
}

#[test]
fn an_entry_over_max_entry_bytes_is_not_cached() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let mut m = Machine::new(config);
    to_cache_lookup(&mut m, b"{}");
    m.on(Event::EdgeCacheRead {
        slot: None,
        now_ms: 0,
        epoch: Some(EPOCH),
    });
    let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Completed {
        response: StoredResponse::new(201, vec![], &[b'x'; 5000]),
    })));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
    assert_eq!(reply(&out).body.len(), 5000, "still replayed");
}

#[test]
fn a_policy_can_opt_out_of_the_edge_cache() {
    let config = cached(
        serde_json::json!({}),
        serde_json::json!({"edge_cache": false}),
    );
    let mut m = Machine::new(config);
    assert!(matches!(to_claim(&mut m, b"{}"), StoreCall::Claim { .. }));
}

#[test]
fn a_dry_run_never_uses_the_edge_cache() {
    // Every dry-run request claims, so the store sees all the traffic a
    // rollout is measuring; what enforce would replay counts as dry_run.replay.
    let config = cached(
        serde_json::json!({"mode": "dry_run"}),
        serde_json::json!({}),
    );
    let mut m = Machine::new(config);
    assert!(matches!(to_claim(&mut m, b"{}"), StoreCall::Claim { .. }));
    let out = m.on(Event::ClaimAnswered(Ok(won(1))));
    assert!(out.contains(&Action::ResumeRequest));
    respond(&mut m, 201, true);
    let out = m.on(Event::FinalizeAnswered(Ok(())));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. }))
    );
}

// ----- robustness -----------------------------------------------------------

fn arb_headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        Just(":method".to_owned()),
        Just(":path".to_owned()),
        Just(":authority".to_owned()),
        Just("idempotency-key".to_owned()),
        Just("idempotency-fence".to_owned()),
        Just("content-length".to_owned()),
        Just("content-type".to_owned()),
        Just("if-match".to_owned()),
        "[a-z-]{1,12}",
    ];
    let value = prop_oneof![
        Just(b"POST".to_vec()),
        Just(b"/payments/1".to_vec()),
        Just(b"application/json".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec((name, value), 0..10)
}

fn arb_claim() -> impl Strategy<Value = Result<ClaimResponse, CallError>> {
    prop_oneof![
        any::<i64>().prop_map(|f| Ok(won(f))),
        (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..20),).prop_map(
            |(status, body)| Ok(ClaimResponse::Completed {
                response: StoredResponse {
                    status,
                    headers: vec![("content-type".into(), "x".into())],
                    body
                }
            })
        ),
        Just(Err(CallError::MalformedRecord)),
        Just(Ok(ClaimResponse::Conflict)),
        any::<u64>().prop_map(|s| Ok(ClaimResponse::InProgress { retry_after_s: s })),
        any::<u64>().prop_map(|s| Ok(ClaimResponse::Cooldown { retry_after_s: s })),
        Just(Ok(ClaimResponse::NotReplayable)),
        Just(Ok(ClaimResponse::Unknown)),
        Just(Err(CallError::NoAnswer)),
        Just(Err(CallError::LeaseLost)),
    ]
}

fn arb_ack() -> impl Strategy<Value = Result<(), CallError>> {
    prop_oneof![
        Just(Ok(())),
        Just(Err(CallError::LeaseLost)),
        Just(Err(CallError::NoAnswer)),
        any::<u16>().prop_map(|s| Err(CallError::Status(s))),
    ]
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (
            arb_headers(),
            proptest::option::of("[a-z]{0,5}"),
            any::<bool>()
        )
            .prop_map(|(headers, principal, eos)| {
                headers_event(headers, principal.as_deref(), eos)
            }),
        (0usize..4096, any::<bool>()).prop_map(|(n, eos)| Event::RequestBodyChunk {
            buffered_bytes: n,
            end_of_stream: eos
        }),
        Just(Event::RequestTrailers),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|body| Event::RequestBodyComplete { body }),
        arb_claim().prop_map(Event::ClaimAnswered),
        any::<bool>().prop_map(|eos| Event::ResponseHeaders { end_of_stream: eos }),
        (any::<u16>(), arb_headers(), any::<bool>(), any::<bool>()).prop_map(
            |(status, headers, proxy, eos)| {
                Event::ResponseHeadersRead {
                    status,
                    headers,
                    origin: if proxy {
                        ResponseOrigin::Proxy
                    } else {
                        ResponseOrigin::Upstream
                    },
                    end_of_stream: eos,
                }
            }
        ),
        (0usize..4096, any::<bool>()).prop_map(|(n, eos)| Event::ResponseBodyChunk {
            buffered_bytes: n,
            end_of_stream: eos
        }),
        Just(Event::ResponseTrailers),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|body| Event::ResponseBodyComplete { body }),
        arb_ack().prop_map(Event::FinalizeAnswered),
        arb_ack().prop_map(Event::ReleaseAnswered),
        Just(Event::StreamDone),
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
            any::<u64>(),
            proptest::option::of(0u64..3),
        )
            .prop_map(|(slot, now_ms, epoch)| Event::EdgeCacheRead {
                slot,
                now_ms,
                epoch
            }),
    ]
}

/// A guarded prefix so that random sequences also explore the deep states.
fn guarded_prefix() -> Vec<Event> {
    vec![
        headers_event(keyed(), Some("alice"), false),
        Event::RequestBodyChunk {
            buffered_bytes: 2,
            end_of_stream: true,
        },
        Event::RequestBodyComplete {
            body: b"{}".to_vec(),
        },
    ]
}

proptest! {
    #[test]
    fn the_machine_never_panics(guarded in any::<bool>(), events in proptest::collection::vec(arb_event(), 0..24)) {
        let config = cached(
            serde_json::json!({}),
            serde_json::json!({"max_request_body_bytes": 1024, "max_cacheable_response_bytes": 1024}),
        );
        let mut m = Machine::new(config);
        let prefix = if guarded { guarded_prefix() } else { Vec::new() };
        let mut started_renewal = 0usize;
        let mut stopped_renewal = 0usize;
        for event in prefix.into_iter().chain(events) {
            let callback = matches!(
                event,
                Event::RequestHeaders { .. }
                    | Event::RequestBodyChunk { .. }
                    | Event::RequestTrailers
                    | Event::ResponseHeaders { .. }
                    | Event::ResponseBodyChunk { .. }
                    | Event::ResponseTrailers
                    | Event::ResponseHeadersRead { .. }
                    | Event::EdgeCacheRead { .. }
            );
            let mut out = Vec::new();
            for action in m.on(event) {
                match action {
                    // The adapter reads the head at once, inside the same callback.
                    Action::ReadResponseHeaders { end_of_stream } => {
                        out.extend(m.on(head(200, ResponseOrigin::Upstream, end_of_stream)));
                    }
                    other => out.push(other),
                }
            }
            let verdicts = out
                .iter()
                .filter(|a| {
                    matches!(
                        a,
                        Action::ContinueRequest
                            | Action::PauseRequest
                            | Action::ContinueResponse
                            | Action::PauseResponse
                    )
                })
                .count();
            // Exactly one return value per host callback, none otherwise.
            prop_assert_eq!(verdicts, usize::from(callback));
            started_renewal += out.iter().filter(|a| matches!(a, Action::StartRenewal(_))).count();
            stopped_renewal += out
                .iter()
                .filter(|a| matches!(a, Action::StopRenewal { .. } | Action::HandOff(_)))
                .count();
            prop_assert!(stopped_renewal <= started_renewal);
        }
        // F14: a won claim is never forgotten. By the end of the stream it was
        // settled by the stream (StopRenewal) or handed to the outbox, once.
        let out = m.on(Event::StreamDone);
        stopped_renewal += out
            .iter()
            .filter(|a| matches!(a, Action::StopRenewal { .. } | Action::HandOff(_)))
            .count();
        prop_assert_eq!(stopped_renewal, started_renewal);
    }
}

#[test]
fn a_stray_claim_answer_does_not_drop_the_recording() {
    let mut m = to_upstream(config());
    assert!(
        m.on(Event::ClaimAnswered(Ok(won(1)))).is_empty(),
        "an answer nobody waits for changes nothing"
    );
    let out = respond(&mut m, 200, true);
    assert_eq!(
        calls(&out).len(),
        1,
        "the won request's response is still recorded: {out:?}"
    );
}

#[test]
fn dry_run_followers_never_long_poll() {
    let mut m = Machine::new(config_with(
        serde_json::json!({"mode": "dry_run"}),
        serde_json::json!({}),
    ));
    match to_claim(&mut m, b"{}") {
        StoreCall::Claim { request, .. } => assert_eq!(
            request.wait_ms, None,
            "dry_run never holds a request up to follower_wait"
        ),
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[test]
fn without_a_recent_operator_epoch_the_edge_cache_is_not_used() {
    let config = cached(serde_json::json!({}), serde_json::json!({}));
    let body = br#"{"amount": 10}"#;
    let (scope, fingerprint) = claim_of(Rc::clone(&config), body);
    let mut m = Machine::new(Rc::clone(&config));
    to_cache_lookup(&mut m, body);
    // A matching entry, but the worker has no fresh word on erasures: claim.
    let out = m.on(Event::EdgeCacheRead {
        slot: Some(slot_for(scope, fingerprint, 1_000)),
        now_ms: 2_000,
        epoch: None,
    });
    assert_eq!(calls(&out).len(), 1, "{out:?}");
    // …and what the claim returns is not cached either.
    let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Completed {
        response: StoredResponse::new(201, vec![], b"{}"),
    })));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. })),
        "{out:?}"
    );
    // An entry from an older epoch is a miss too.
    let mut m = Machine::new(Rc::clone(&config));
    to_cache_lookup(&mut m, body);
    let out = m.on(Event::EdgeCacheRead {
        slot: Some(slot_for(scope, fingerprint, 1_000)),
        now_ms: 2_000,
        epoch: Some(EPOCH + 1),
    });
    assert_eq!(calls(&out).len(), 1, "{out:?}");
    // What it writes carries the epoch it read under.
    let out = m.on(Event::ClaimAnswered(Ok(ClaimResponse::Completed {
        response: StoredResponse::new(201, vec![], b"{}"),
    })));
    let written = out.iter().find_map(|a| match a {
        Action::WriteEdgeCache { entry, .. } => Some(entry.epoch),
        _ => None,
    });
    assert_eq!(written, Some(EPOCH + 1));
}
