//! The stream under any sequence of host callbacks and answers, driven by
//! the same driver production runs: it never panics, every callback gets the
//! machine's own answer, and a won claim is never forgotten (F14).

use keyflight_protocol::wire::StoredResponse;
use proptest::prelude::*;

use super::*;
use crate::drive::host::LogLevel;
use crate::metrics::OutboxEvent;

/// One thing the host may do next.
#[derive(Debug, Clone)]
enum Step {
    /// A callback, with what the host holds at that moment.
    Callback {
        callback: Callback,
        headers: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
        refuse_dispatch: bool,
    },
    /// The call in flight answers (or a token nobody waits for, when `stray`).
    Answer {
        stray: bool,
        status: Option<u16>,
        body: Vec<u8>,
    },
    /// `on_log` / `on_done`.
    Done,
}

fn arb_headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        Just(":method".to_owned()),
        Just(":path".to_owned()),
        Just(":authority".to_owned()),
        Just(":status".to_owned()),
        Just("idempotency-key".to_owned()),
        Just("idempotency-fence".to_owned()),
        Just("x-user".to_owned()),
        Just("content-length".to_owned()),
        Just("content-type".to_owned()),
        Just("if-match".to_owned()),
        "[a-z-]{1,12}",
    ];
    let value = prop_oneof![
        Just(b"POST".to_vec()),
        Just(b"/payments/1".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"200".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec((name, value), 0..10)
}

fn arb_callback() -> impl Strategy<Value = Callback> {
    prop_oneof![
        any::<bool>().prop_map(|end_of_stream| Callback::RequestHeaders { end_of_stream }),
        (0usize..4096, any::<bool>()).prop_map(|(buffered_bytes, end_of_stream)| {
            Callback::RequestBody {
                buffered_bytes,
                end_of_stream,
            }
        }),
        Just(Callback::RequestTrailers),
        any::<bool>().prop_map(|end_of_stream| Callback::ResponseHeaders { end_of_stream }),
        (0usize..4096, any::<bool>()).prop_map(|(buffered_bytes, end_of_stream)| {
            Callback::ResponseBody {
                buffered_bytes,
                end_of_stream,
            }
        }),
        Just(Callback::ResponseTrailers),
    ]
}

/// Claim answers of every outcome, acks, problems and garbage.
fn arb_answer_body() -> impl Strategy<Value = Vec<u8>> {
    let claim = prop_oneof![
        any::<i64>().prop_map(won),
        (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..20)).prop_map(|(status, body)| {
            ClaimResponse::Completed {
                response: StoredResponse {
                    status,
                    headers: vec![("content-type".into(), "x".into())],
                    body,
                },
            }
        }),
        Just(ClaimResponse::Conflict),
        any::<u64>().prop_map(|s| ClaimResponse::InProgress { retry_after_s: s }),
        any::<u64>().prop_map(|s| ClaimResponse::Cooldown { retry_after_s: s }),
        Just(ClaimResponse::NotReplayable),
        Just(ClaimResponse::Unknown { fence: None }),
        Just(ClaimResponse::Unknown { fence: Some(3) }),
    ];
    prop_oneof![
        3 => Just(serde_json::to_vec(&won(3)).unwrap()),
        3 => claim.prop_map(|answer| serde_json::to_vec(&answer).unwrap()),
        2 => Just(b"{}".to_vec()),
        1 => Just(br#"{"type":"t","title":"t","status":409,"detail":"d","code":"lease_lost"}"#.to_vec()),
        1 => Just(br#"{"outcome":"completed","response":{"status":200,"headers":[],"body_b64":"*"}}"#.to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (
            arb_callback(),
            arb_headers(),
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(callback, headers, body, refuse_dispatch)| Step::Callback {
                callback,
                headers,
                body,
                refuse_dispatch,
            }),
        2 => (
            proptest::bool::weighted(0.2),
            prop_oneof![
                6 => Just(Some(200u16)),
                1 => Just(Some(409)),
                1 => Just(Some(413)),
                1 => Just(Some(503)),
                1 => Just(None),
                1 => any::<u16>().prop_map(Some),
            ],
            arb_answer_body(),
        )
            .prop_map(|(stray, status, body)| Step::Answer { stray, status, body }),
        1 => Just(Step::Done),
    ]
}

/// A prefix so that random sequences also explore the deep states: none,
/// a guarded request up to its claim, or one forwarded with a won lease.
fn prefix(depth: u8) -> Vec<Step> {
    let mut steps = vec![
        Step::Callback {
            callback: Callback::RequestHeaders {
                end_of_stream: false,
            },
            headers: keyed(),
            body: Vec::new(),
            refuse_dispatch: false,
        },
        Step::Callback {
            callback: Callback::RequestBody {
                buffered_bytes: 2,
                end_of_stream: true,
            },
            headers: Vec::new(),
            body: b"{}".to_vec(),
            refuse_dispatch: false,
        },
        Step::Answer {
            stray: false,
            status: Some(200),
            body: serde_json::to_vec(&won(3)).unwrap(),
        },
    ];
    steps.truncate(match depth {
        0 => 0,
        1 => 2,
        _ => 3,
    });
    steps
}

fn run(s: &mut Harness, step: Step) -> Vec<Action> {
    match step {
        Step::Callback {
            callback,
            headers,
            body,
            refuse_dispatch,
        } => {
            s.host.refuse_dispatch = refuse_dispatch;
            match callback {
                Callback::RequestHeaders { .. } => {
                    s.host.request_headers = headers;
                    s.host.request_body = body;
                }
                Callback::RequestBody { .. } | Callback::RequestTrailers => {
                    s.host.request_body = body;
                }
                _ => {
                    s.host.response_headers = headers;
                    s.host.response_body = body;
                }
            }
            s.stream.on_callback(callback, &mut s.host);
            s.host.take()
        }
        Step::Answer {
            stray,
            status,
            body,
        } => {
            let token = match (stray, s.host.last_token()) {
                (false, Some(token)) => token,
                _ => u32::MAX,
            };
            s.answer_token(token, status, &body)
        }
        Step::Done => s.done(),
    }
}

/// Every combination of the IETF draft's per-policy settings.
fn arb_draft_settings() -> impl Strategy<Value = serde_json::Value> {
    (
        prop_oneof![Just(409), Just(422)],
        prop_oneof![Just("wait"), Just("conflict")],
        prop_oneof![Just("cooldown"), Just("record")],
        prop_oneof![Just("retry"), Just("hold"), Just("record")],
    )
        .prop_map(|(mismatch, in_progress, server_errors, uncertain)| {
            serde_json::json!({
                "mismatch_status": mismatch,
                "in_progress": in_progress,
                "server_errors": server_errors,
                "uncertain": uncertain,
            })
        })
}

proptest! {
    #[test]
    fn the_stream_never_panics_and_never_forgets_a_claim(
        depth in 0u8..3,
        steps in proptest::collection::vec(arb_step(), 0..24),
        draft in arb_draft_settings(),
    ) {
        let mut policy = serde_json::json!({"max_request_body_bytes": 1024, "max_cacheable_response_bytes": 1024});
        for (k, v) in draft.as_object().unwrap() {
            policy[k] = v.clone();
        }
        let config = cached(serde_json::json!({}), policy);
        let mut s = Harness::new(config);
        let mut taken_over = 0;
        for step in prefix(depth).into_iter().chain(steps) {
            let out = run(&mut s, step);
            // Every callback got the machine's own answer, not the driver's fallback.
            prop_assert!(
                !out.iter().any(|a| matches!(a, Action::Log { level: LogLevel::Warn, message }
                    if message.contains("gave no answer"))),
                "{:?}", out
            );
            taken_over += counts(&out)
                .iter()
                .filter(|m| **m == Metric::Outbox(OutboxEvent::TakenOver))
                .count();
            // Nothing reaches the outbox that the stream did not register.
            let outbox = s.worker.outbox();
            prop_assert_eq!(outbox.renewing(), outbox.claims());
        }
        // F14: a won claim is never forgotten. By the end of the stream it was
        // settled by the stream or handed to the outbox, once.
        let out = s.done();
        taken_over += counts(&out)
            .iter()
            .filter(|m| **m == Metric::Outbox(OutboxEvent::TakenOver))
            .count();
        let outbox = s.worker.outbox();
        prop_assert_eq!(outbox.claims(), outbox.depth(), "nothing left that only a stream would settle");
        prop_assert!(taken_over <= 1);
        prop_assert!(outbox.depth() <= taken_over);
    }
}
