use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    ClaimRequest, FinalizeRequest, ReleaseAs, ReleaseRequest, StoredResponse,
};
use uuid::Uuid;

use std::time::Duration;

use super::*;

fn claim(stream: StreamId, wait_ms: Option<u64>) -> Queued {
    Queued {
        stream,
        call: StoreCall::Claim {
            scope: Digest([u8::try_from(stream).unwrap(); 32]),
            request: ClaimRequest {
                fingerprint: Digest([1; 32]),
                lease_ms: 30_000,
                wait_ms,
                retention_s: None,
                previous: None,
                at_most_once: false,
            },
        },
        timeout: Duration::from_secs(1),
    }
}

fn finalize(stream: StreamId, body_bytes: usize) -> Queued {
    Queued {
        stream,
        call: StoreCall::Finalize {
            scope: Digest([u8::try_from(stream).unwrap(); 32]),
            request: FinalizeRequest {
                claim_id: Uuid::nil(),
                response: StoredResponse {
                    status: 201,
                    headers: Vec::new(),
                    body: vec![b'x'; body_bytes],
                },
                replayable: true,
                previous_scope: None,
            },
        },
        timeout: Duration::from_secs(1),
    }
}

fn release(stream: StreamId) -> Queued {
    Queued {
        stream,
        call: StoreCall::Release {
            scope: Digest([u8::try_from(stream).unwrap(); 32]),
            request: ReleaseRequest {
                claim_id: Uuid::nil(),
                release_as: ReleaseAs::Forget,
                cooldown_ms: None,
                previous_scope: None,
            },
        },
        timeout: Duration::from_secs(1),
    }
}

fn streams(send: &Send) -> Vec<StreamId> {
    match send {
        Send::Alone(one) => vec![one.stream],
        Send::Batch(calls) => calls.iter().map(|q| q.stream).collect(),
    }
}

#[test]
fn only_the_first_call_of_a_turn_wakes_the_root() {
    let mut queue = CallQueue::default();
    let mut wakes = 0;
    for stream in [1, 2] {
        queue
            .push(claim(stream, None), || {
                wakes += 1;
                true
            })
            .unwrap();
    }
    assert_eq!(wakes, 1);
    assert_eq!(queue.take().len(), 2);
    queue
        .push(claim(3, None), || {
            wakes += 1;
            true
        })
        .unwrap();
    assert_eq!(wakes, 2, "a new turn wakes again");
}

#[test]
fn a_call_whose_wake_up_failed_is_given_back_and_the_next_one_wakes() {
    let mut queue = CallQueue::default();
    assert_eq!(queue.push(claim(1, None), || false), Err(claim(1, None)));
    let mut woke = false;
    queue
        .push(claim(2, None), || {
            woke = true;
            true
        })
        .unwrap();
    assert!(woke);
    assert_eq!(queue.take(), [claim(2, None)]);
}

#[test]
fn claims_and_finalizes_batch_by_kind_and_the_rest_goes_alone() {
    let calls = vec![
        claim(1, None),
        finalize(2, 10),
        release(3),
        claim(4, None),
        finalize(5, 10),
    ];
    let sends = pack(calls, 1 << 20, true);
    let shapes: Vec<(bool, Vec<StreamId>)> = sends
        .iter()
        .map(|s| (matches!(s, Send::Batch(_)), streams(s)))
        .collect();
    assert_eq!(
        shapes,
        [(false, vec![3]), (true, vec![1, 4]), (true, vec![2, 5])]
    );
}

#[test]
fn a_lone_call_goes_on_its_single_route() {
    assert_eq!(
        pack(vec![claim(1, None)], 1 << 20, true),
        [Send::Alone(claim(1, None))]
    );
}

#[test]
fn without_batch_routes_every_call_goes_alone() {
    let sends = pack(vec![claim(1, None), claim(2, None)], 1 << 20, false);
    assert!(sends.iter().all(|s| matches!(s, Send::Alone(_))));
    assert_eq!(sends.len(), 2);
}

#[test]
fn batches_hold_at_most_the_wire_limit() {
    let calls = (0..MAX_BATCH_CALLS as u32 + 1)
        .map(|i| claim(i, None))
        .collect();
    let sizes: Vec<usize> = pack(calls, 1 << 20, true)
        .iter()
        .map(|s| streams(s).len())
        .collect();
    assert_eq!(sizes, [MAX_BATCH_CALLS, 1]);
}

#[test]
fn finalizes_are_packed_under_half_the_store_body_limit() {
    // 30 KB of body is 40 KB of base64: two fit under 100 KB, a third does not; an
    // 80 KB body (107 KB of base64) is over the budget by itself and goes alone.
    let calls = vec![
        finalize(1, 30_000),
        finalize(2, 30_000),
        finalize(3, 30_000),
        finalize(4, 80_000),
    ];
    let sends = pack(calls, 200_000, true);
    let shapes: Vec<Vec<StreamId>> = sends.iter().map(streams).collect();
    assert_eq!(shapes, [vec![1, 2], vec![4], vec![3]]);
    assert!(matches!(sends[1], Send::Alone(_)));
}

fn batch_answer(items: &[(u16, &str)]) -> Answer {
    let answers: Vec<String> = items
        .iter()
        .map(|(status, body)| format!(r#"{{"status":{status},"body":{body}}}"#))
        .collect();
    Answer::ok(format!(r#"{{"answers":[{}]}}"#, answers.join(",")))
}

#[test]
fn each_call_gets_its_own_answer_in_order() {
    let won = r#"{"outcome":"conflict"}"#;
    let lost = r#"{"type":"about:blank","code":"lease_lost"}"#;
    let outcome = answer_batch(
        vec![claim(1, None), claim(2, None)],
        batch_answer(&[(200, won), (409, lost)]),
    );
    assert_eq!(
        outcome.delivered,
        [
            Delivery {
                stream: 1,
                answer: Answer::ok(won)
            },
            Delivery {
                stream: 2,
                answer: Answer::Received {
                    status: Some(409),
                    body: lost.as_bytes().to_vec(),
                    framed: false,
                }
            },
        ]
    );
    assert!(outcome.resend.is_empty() && !outcome.batches_unsupported);
}

#[test]
fn a_claim_that_asked_to_wait_for_a_running_request_is_sent_again_alone() {
    let running = r#"{"outcome":"in_progress","retry_after_s":1}"#;
    let outcome = answer_batch(
        vec![claim(1, Some(5000)), claim(2, None)],
        batch_answer(&[(200, running), (200, running)]),
    );
    assert_eq!(outcome.resend, [claim(1, Some(5000))]);
    assert_eq!(
        outcome.delivered,
        [Delivery {
            stream: 2,
            answer: Answer::ok(running)
        }]
    );
}

#[test]
fn an_unreadable_batch_answer_is_every_calls_failed_answer() {
    for whole in [
        Answer::Received {
            status: None,
            body: Vec::new(),
            framed: false,
        },
        Answer::Received {
            status: Some(503),
            body: b"{}".to_vec(),
            framed: false,
        },
        Answer::ok("not json"),
        // One answer for two calls: none can be matched to its call.
        batch_answer(&[(200, r#"{"outcome":"conflict"}"#)]),
        Answer::NotSent,
    ] {
        let outcome = answer_batch(vec![claim(1, Some(10)), claim(2, None)], whole.clone());
        assert_eq!(
            outcome.delivered,
            [
                Delivery {
                    stream: 1,
                    answer: whole.clone()
                },
                Delivery {
                    stream: 2,
                    answer: whole.clone()
                },
            ],
            "{whole:?}"
        );
        assert!(outcome.resend.is_empty() && !outcome.batches_unsupported);
    }
}

#[test]
fn a_store_without_batch_routes_gets_each_call_again_alone() {
    for status in [404, 405] {
        let refused = Answer::Received {
            status: Some(status),
            body: Vec::new(),
            framed: false,
        };
        let outcome = answer_batch(vec![claim(1, None), finalize(2, 1)], refused);
        assert!(outcome.batches_unsupported);
        assert!(outcome.delivered.is_empty());
        assert_eq!(outcome.resend, [claim(1, None), finalize(2, 1)]);
    }
}
