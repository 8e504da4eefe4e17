//! A worker's streams and its root context over one fake host, coalescing their store
//! calls (`docs/stream-machine.md#coalesced-calls`): the streams queue, the root sends
//! on its wake-up and delivers each answer to its stream.

use std::rc::Rc;

use keyflight_protocol::wire::{ClaimResponse, WonHow};

use super::stream::{Callback, Stream};
use super::worker::Root;

use crate::coalesce::{Delivery, Queued};
use crate::drive::host::{CalloutAnswered, Driver};
use crate::machine::Action;
use crate::problem::LocalReply;
use crate::store_call::{Answer, Callout, StoreCall};
use crate::testing::FakeHost;

const WAKE_QUEUE: u32 = 9;

fn configured(coalesce_calls: bool) -> (Root, FakeHost) {
    let plugin = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000,
                        "coalesce_calls": coalesce_calls},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"}}]
    });
    let mut host = FakeHost {
        now_ms: 1_000_000,
        plugin_configuration: plugin.to_string().into_bytes(),
        wake_queue: Some(WAKE_QUEUE),
        ..FakeHost::default()
    };
    let mut root = Root::default();
    assert!(root.configure(&mut host));
    (root, host)
}

/// Stream `id` of `root` starts a guarded POST with key `key`; its claim is made.
fn claiming(root: &Root, host: &mut FakeHost, id: u32, key: &str) -> Stream {
    let mut stream = Stream::for_root(root, id);
    host.request_headers = [
        (":method", "POST"),
        (":path", "/payments"),
        (":authority", "api.example.com"),
        ("idempotency-key", key),
        ("x-user", "alice"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect();
    stream.on_callback(
        Callback::RequestHeaders {
            end_of_stream: true,
        },
        host,
    );
    stream
}

fn answer_root(root: &mut Root, host: &mut FakeHost, token: u32, status: u16, body: &str) {
    host.call_headers = vec![(":status".into(), status.to_string().into_bytes())];
    host.call_body = body.as_bytes().to_vec();
    let answered = CalloutAnswered {
        token,
        num_headers: 1,
        body_size: body.len(),
    };
    root.on_call_answer(answered, host);
}

fn won() -> String {
    serde_json::to_string(&ClaimResponse::Won {
        claim_id: uuid::Uuid::from_u128(1),
        fence: 1,
        how: WonHow::Claimed,
        lease_ms: 30_000,
    })
    .unwrap()
}

fn callout_shape(callout: &Callout) -> (&'static str, usize) {
    match callout {
        Callout::Call { call, .. } => (call.name(), 1),
        Callout::Batch { calls, .. } => ("batch", calls.len()),
        Callout::Epoch { .. } => ("epoch", 0),
    }
}

/// What the adapter does after the root context's callback: hands out the answers, then
/// sends what the streams queued meanwhile, until nothing more is owed (across the
/// callbacks a herd's answers take, `MAX_HANDED_PER_CALLBACK` each).
fn deliver(root: &mut Root, streams: &mut [(u32, &mut Stream)], host: &mut FakeHost) -> usize {
    let mut delivered = 0;
    loop {
        let deliveries: Vec<Delivery> = match root.take_deliveries(host) {
            none if none.is_empty() => {
                root.callback_returned();
                root.take_deliveries(host)
            }
            some => some,
        };
        if deliveries.is_empty() {
            return delivered;
        }
        delivered += deliveries.len();
        for delivery in &deliveries {
            for (id, stream) in streams.iter_mut() {
                if *id == delivery.stream {
                    stream.on_delivered(delivery.answer.clone(), host);
                }
            }
        }
        root.on_wake(host);
    }
}

fn replies(host: &FakeHost) -> Vec<u16> {
    host.did
        .iter()
        .filter_map(|a| match a {
            Action::Reply(LocalReply { status, .. }) => Some(*status),
            _ => None,
        })
        .collect()
}

#[test]
fn the_claims_of_one_turn_go_as_one_batch_and_each_stream_gets_its_own_answer() {
    let (mut root, mut host) = configured(true);
    let mut first = claiming(&root, &mut host, 1, "k-1");
    let mut second = claiming(&root, &mut host, 2, "k-2");
    assert!(
        host.dispatched.is_empty(),
        "streams queue, they do not send"
    );
    assert_eq!(host.wakes, [WAKE_QUEUE], "one wake-up for the turn");

    root.on_wake(&mut host);
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(shapes, [("batch", 2)]);
    let token = host.last_token().unwrap();
    assert_eq!(
        host.dispatched_for,
        [(token, vec![1, 2])],
        "the host learns whose calls the batch carries"
    );
    host.take();
    let batch = format!(
        r#"{{"answers":[{{"status":200,"body":{}}},{{"status":200,"body":{{"outcome":"conflict"}}}}]}}"#,
        won()
    );
    answer_root(&mut root, &mut host, token, 200, &batch);
    let delivered = deliver(
        &mut root,
        &mut [(1, &mut first), (2, &mut second)],
        &mut host,
    );
    assert_eq!(delivered, 2);
    assert!(
        host.did.contains(&Action::ResumeRequest),
        "the winner goes upstream: {:?}",
        host.did
    );
    assert_eq!(replies(&host), [409], "the other key's claim conflicts");
}

#[test]
fn a_lone_claim_goes_on_its_single_route() {
    let (mut root, mut host) = configured(true);
    let mut stream = claiming(&root, &mut host, 1, "k-1");
    root.on_wake(&mut host);
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(shapes, [("claim", 1)]);
    let token = host.last_token().unwrap();
    host.take();
    answer_root(&mut root, &mut host, token, 200, &won());
    assert_eq!(deliver(&mut root, &mut [(1, &mut stream)], &mut host), 1);
    assert!(host.did.contains(&Action::ResumeRequest), "{:?}", host.did);
}

#[test]
fn a_store_without_batch_routes_gets_each_claim_alone_for_a_while() {
    let (mut root, mut host) = configured(true);
    let _first = claiming(&root, &mut host, 1, "k-1");
    let _second = claiming(&root, &mut host, 2, "k-2");
    root.on_wake(&mut host);
    let token = host.last_token().unwrap();
    answer_root(&mut root, &mut host, token, 404, "{}");
    assert!(
        root.take_deliveries(&mut host).is_empty(),
        "no claim ran: none is answered"
    );
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .skip(1)
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(
        shapes,
        [("claim", 1), ("claim", 1)],
        "each claim again, alone"
    );

    host.dispatched.clear();
    let _third = claiming(&root, &mut host, 3, "k-3");
    let _fourth = claiming(&root, &mut host, 4, "k-4");
    root.on_wake(&mut host);
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(
        shapes,
        [("claim", 1), ("claim", 1)],
        "no batch for a minute"
    );

    host.dispatched.clear();
    host.now_ms += 60_000;
    let _fifth = claiming(&root, &mut host, 5, "k-5");
    let _sixth = claiming(&root, &mut host, 6, "k-6");
    root.on_wake(&mut host);
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(shapes, [("batch", 2)], "then batches are tried again");
}

#[test]
fn a_failed_batch_is_each_streams_failed_claim() {
    let (mut root, mut host) = configured(true);
    let mut first = claiming(&root, &mut host, 1, "k-1");
    let mut second = claiming(&root, &mut host, 2, "k-2");
    root.on_wake(&mut host);
    let token = host.last_token().unwrap();
    host.take();
    let failed = CalloutAnswered {
        token,
        num_headers: 0,
        body_size: 0,
    };
    root.on_call_answer(failed, &mut host);
    assert_eq!(
        deliver(
            &mut root,
            &mut [(1, &mut first), (2, &mut second)],
            &mut host
        ),
        2
    );
    assert_eq!(
        replies(&host),
        [503, 503],
        "both fail closed, as a lost claim does"
    );
}

#[test]
fn a_batch_the_host_refuses_answers_every_stream_at_once() {
    let (mut root, mut host) = configured(true);
    let mut first = claiming(&root, &mut host, 1, "k-1");
    let mut second = claiming(&root, &mut host, 2, "k-2");
    host.refuse_dispatch = true;
    host.take();
    root.on_wake(&mut host);
    assert_eq!(
        deliver(
            &mut root,
            &mut [(1, &mut first), (2, &mut second)],
            &mut host
        ),
        2
    );
    assert_eq!(replies(&host), [503, 503]);
}

#[test]
fn a_stream_that_ended_drops_the_answer_to_its_claim() {
    let (mut root, mut host) = configured(true);
    let mut stream = claiming(&root, &mut host, 1, "k-1");
    stream.on_done(&mut host);
    root.on_wake(&mut host);
    let token = host.last_token().unwrap();
    host.take();
    answer_root(&mut root, &mut host, token, 200, &won());
    assert_eq!(deliver(&mut root, &mut [(1, &mut stream)], &mut host), 1);
    assert!(
        host.did.is_empty(),
        "nothing is done for it: {:?}",
        host.did
    );
}

#[test]
fn a_claim_that_waits_for_a_running_request_is_asked_again_alone() {
    let (mut root, mut host) = configured(true);
    let _first = claiming(&root, &mut host, 1, "k-1");
    let _second = claiming(&root, &mut host, 2, "k-1");
    root.on_wake(&mut host);
    let (token, batch) = host.dispatched.last().cloned().unwrap();
    let Callout::Batch { calls, .. } = &batch else {
        panic!("{batch:?}")
    };
    let waits: Vec<_> = calls
        .iter()
        .map(|c| match c {
            StoreCall::Claim { request, .. } => request.wait_ms,
            _ => None,
        })
        .collect();
    assert!(
        waits.iter().all(|w| w.unwrap_or(0) > 0),
        "the policy waits: {waits:?}"
    );
    let body: serde_json::Value = serde_json::from_slice(&batch.body().unwrap()).unwrap();
    assert!(
        body["calls"][0]["request"].get("wait_ms").is_none(),
        "a batch never waits"
    );
    let running = r#"{"outcome":"in_progress","retry_after_s":1}"#;
    let answers = format!(
        r#"{{"answers":[{{"status":200,"body":{}}},{{"status":200,"body":{running}}}]}}"#,
        won()
    );
    answer_root(&mut root, &mut host, token, 200, &answers);
    let delivered: Vec<u32> = root
        .take_deliveries(&mut host)
        .iter()
        .map(|d| d.stream)
        .collect();
    assert_eq!(delivered, [1]);
    let (_, again) = host.dispatched.last().unwrap();
    assert!(
        matches!(again, Callout::Call { call: StoreCall::Claim { request, .. }, .. } if request.wait_ms.unwrap_or(0) > 0),
        "{again:?}"
    );
}

#[test]
fn without_coalescing_a_stream_sends_its_own_claim() {
    let (root, mut host) = configured(false);
    let _stream = claiming(&root, &mut host, 1, "k-1");
    assert!(host.wakes.is_empty());
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(shapes, [("claim", 1)]);
}

#[test]
fn a_failed_wake_up_leaves_the_stream_to_send_its_own_claim() {
    let (root, mut host) = configured(true);
    host.refuse_wake = true;
    let _stream = claiming(&root, &mut host, 1, "k-1");
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .collect();
    assert_eq!(shapes, [("claim", 1)]);
}

#[test]
fn a_delivered_answer_is_not_an_answer_to_a_dispatched_call() {
    let (root, mut host) = configured(false);
    let mut stream = claiming(&root, &mut host, 1, "k-1");
    host.take();
    stream.on_delivered(Answer::ok(won()), &mut host);
    assert!(host.did.is_empty(), "{:?}", host.did);
}

#[test]
fn calls_whose_wake_up_never_came_go_out_on_the_tick() {
    let (mut root, mut host) = configured(true);
    let _first = claiming(&root, &mut host, 1, "k-1");
    let _second = claiming(&root, &mut host, 2, "k-2");
    root.on_tick(&mut host);
    let shapes: Vec<_> = host
        .dispatched
        .iter()
        .map(|(_, c)| callout_shape(c))
        .filter(|(route, _)| *route != "epoch")
        .collect();
    assert_eq!(shapes, [("batch", 2)]);
}

#[test]
fn a_call_queued_while_the_root_hands_out_answers_goes_out_from_the_root_without_a_wake_up() {
    let (mut root, mut host) = configured(true);
    let _stream = claiming(&root, &mut host, 1, "k-1");
    root.on_wake(&mut host);
    let (token, claim) = host.dispatched.last().cloned().unwrap();
    let Callout::Call { call, timeout } = claim else {
        panic!("{claim:?}")
    };
    answer_root(&mut root, &mut host, token, 200, &won());
    host.wakes.clear();
    host.refuse_wake = true;
    assert_eq!(root.take_deliveries(&mut host).len(), 1);
    let follow_up = Queued {
        stream: 1,
        call,
        timeout,
    };
    let worker = Rc::clone(root.worker().unwrap());
    assert_eq!(
        worker.queue_call(follow_up, &mut host),
        Ok(()),
        "queued although the host would refuse a wake-up"
    );
    assert!(host.wakes.is_empty(), "no wake-up: {:?}", host.wakes);
    root.on_wake(&mut host);
    let again = host.last_token().unwrap();
    assert_ne!(again, token, "the root sent the follow-up");
    answer_root(&mut root, &mut host, again, 200, &won());
    let delivered: Vec<u32> = root
        .take_deliveries(&mut host)
        .iter()
        .map(|d| d.stream)
        .collect();
    assert_eq!(delivered, [1], "its answer reaches the stream");
}

/// A stream handed an `unknown` claim answer by the root context asks the service from
/// inside the root's callback, so the host answers the root: the root passes the answer
/// on, and the stream reports it (`docs/reconcile.md`).
#[test]
fn a_reconcile_question_asked_inside_the_roots_callback_reaches_its_stream() {
    let plugin = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"},
                      "uncertain": "reconcile", "reconcile": {"cluster": "payments"}}]
    });
    let mut host = FakeHost {
        now_ms: 1_000_000,
        plugin_configuration: plugin.to_string().into_bytes(),
        wake_queue: Some(WAKE_QUEUE),
        ..FakeHost::default()
    };
    let mut root = Root::default();
    assert!(root.configure(&mut host));
    let mut stream = claiming(&root, &mut host, 1, "k-1");
    root.on_wake(&mut host);
    let token = host.last_token().unwrap();
    let Some((_, Callout::Call { call, .. })) = host.dispatched.last() else {
        panic!("a lone claim: {:?}", host.dispatched)
    };
    let scope = call.scope();
    answer_root(
        &mut root,
        &mut host,
        token,
        200,
        r#"{"outcome":"unknown","fence":7}"#,
    );
    deliver(&mut root, &mut [(1, &mut stream)], &mut host);
    let (question, _) = *host.asked.last().expect("the service is asked");

    let absent = serde_json::json!({"outcome": "absent", "scope": scope.to_hex(), "fence": 7});
    answer_root(&mut root, &mut host, question, 200, &absent.to_string());
    assert_eq!(deliver(&mut root, &mut [(1, &mut stream)], &mut host), 1);
    let reported = host.dispatched.iter().any(|(_, callout)| {
        matches!(
            callout,
            Callout::Call {
                call: StoreCall::Reconciled { .. },
                ..
            }
        )
    });
    assert!(
        reported,
        "the answer reached the stream: {:?}",
        host.dispatched
    );
}
