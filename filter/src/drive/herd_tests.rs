//! A worker's followers of one request share one long-poll, and each gets its own answer
//! from it (`docs/stream-machine.md#herds`).

use keyflight_protocol::wire::{ClaimResponse, StoredResponse, WonHow};

use super::stream::{Callback, Stream};
use super::worker::{MAX_HANDED_PER_CALLBACK, Root};

use crate::coalesce::Delivery;
use crate::drive::host::{CalloutAnswered, Driver};
use crate::machine::Action;
use crate::metrics::{EventKind, Metric};
use crate::problem::LocalReply;
use crate::store_call::{Callout, StoreCall};
use crate::testing::FakeHost;

const WAKE_QUEUE: u32 = 9;
const HERD: u32 = 5;

fn configured() -> (Root, FakeHost) {
    let plugin = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"},
                      "follower_wait_ms": 5000}]
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

/// Stream `id` POSTs `body` with key `k`; its claim is queued.
fn claiming(root: &Root, host: &mut FakeHost, id: u32, body: &str) -> Stream {
    let mut stream = Stream::for_root(root, id);
    host.request_headers = [
        (":method", "POST"),
        (":path", "/payments"),
        (":authority", "api.example.com"),
        ("content-type", "application/json"),
        ("idempotency-key", "k"),
        ("x-user", "alice"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect();
    host.request_body = body.as_bytes().to_vec();
    stream.on_callback(
        Callback::RequestHeaders {
            end_of_stream: false,
        },
        host,
    );
    stream.on_callback(
        Callback::RequestBody {
            buffered_bytes: body.len(),
            end_of_stream: true,
        },
        host,
    );
    stream
}

fn answer_root(root: &mut Root, host: &mut FakeHost, token: u32, body: &str) {
    host.call_headers = vec![(":status".into(), b"200".to_vec())];
    host.call_body = body.as_bytes().to_vec();
    let answered = CalloutAnswered {
        token,
        num_headers: 1,
        body_size: body.len(),
    };
    root.on_call_answer(answered, host);
}

fn json(response: &ClaimResponse) -> String {
    serde_json::to_string(response).unwrap()
}

/// Every claim of the turn's batch finds the request running: each asks again, to wait.
fn all_running(root: &mut Root, host: &mut FakeHost, streams: usize) {
    root.on_wake(host);
    let token = host.last_token().unwrap();
    let running = json(&ClaimResponse::InProgress { retry_after_s: 1 });
    let answers = vec![format!(r#"{{"status":200,"body":{running}}}"#); streams].join(",");
    answer_root(root, host, token, &format!(r#"{{"answers":[{answers}]}}"#));
}

/// The long-poll claims sent since the batch.
fn long_polls(host: &FakeHost) -> Vec<(u32, u8)> {
    host.dispatched
        .iter()
        .filter_map(|(token, callout)| match callout {
            Callout::Call {
                call: StoreCall::Claim { request, .. },
                ..
            } if request.wait_ms.unwrap_or(0) > 0 => Some((*token, request.fingerprint.0[0])),
            _ => None,
        })
        .collect()
}

/// Hands out every answer the root owes, as the adapter does.
fn deliver(root: &mut Root, streams: &mut [Stream], host: &mut FakeHost) -> Vec<u32> {
    let mut delivered = Vec::new();
    loop {
        let deliveries: Vec<Delivery> = match root.take_deliveries(host) {
            // The callback returns; the wake-up it asked for hands over the rest.
            none if none.is_empty() => {
                root.callback_returned();
                root.take_deliveries(host)
            }
            some => some,
        };
        if deliveries.is_empty() {
            return delivered;
        }
        for delivery in deliveries {
            delivered.push(delivery.stream);
            let index = usize::try_from(delivery.stream - 1).unwrap();
            streams[index].on_delivered(delivery.answer, host);
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

fn joined(host: &FakeHost) -> usize {
    let joined = Action::Count(Metric::Event(EventKind::HerdJoined));
    host.did.iter().filter(|a| **a == joined).count()
}

#[test]
fn followers_of_one_request_make_one_long_poll_and_each_gets_the_answer() {
    let (mut root, mut host) = configured();
    let mut streams: Vec<Stream> = (1..=HERD)
        .map(|id| claiming(&root, &mut host, id, r#"{"amount":1}"#))
        .collect();
    all_running(&mut root, &mut host, streams.len());

    let polls = long_polls(&host);
    assert_eq!(polls.len(), 1, "one long-poll for the herd: {polls:?}");
    assert_eq!(joined(&host), streams.len() - 1);

    let completed = ClaimResponse::Completed {
        response: StoredResponse::new(201, Vec::new(), br#"{"id":"p-1"}"#),
    };
    host.take();
    answer_root(&mut root, &mut host, polls[0].0, &json(&completed));
    let mut delivered = deliver(&mut root, &mut streams, &mut host);
    delivered.sort_unstable();
    assert_eq!(delivered, (1..=HERD).collect::<Vec<_>>(), "every member");
    assert_eq!(replies(&host), [201; HERD as usize], "each replays it");
    assert!(host.dispatched.len() == 2, "no other store call");
}

#[test]
fn another_body_makes_its_own_long_poll() {
    let (mut root, mut host) = configured();
    let _streams = [
        claiming(&root, &mut host, 1, r#"{"amount":1}"#),
        claiming(&root, &mut host, 2, r#"{"amount":1}"#),
        claiming(&root, &mut host, 3, r#"{"amount":2}"#),
    ];
    all_running(&mut root, &mut host, 3);

    let polls = long_polls(&host);
    assert_eq!(polls.len(), 2, "one per fingerprint: {polls:?}");
    assert_ne!(polls[0].1, polls[1].1);
    assert_eq!(joined(&host), 1);
}

#[test]
fn a_won_long_poll_is_its_senders_and_the_others_wait_on_it_as_one() {
    let (mut root, mut host) = configured();
    let mut streams: Vec<Stream> = (1..=3)
        .map(|id| claiming(&root, &mut host, id, r#"{"amount":1}"#))
        .collect();
    all_running(&mut root, &mut host, streams.len());
    let polls = long_polls(&host);
    assert_eq!(polls.len(), 1);

    let won = ClaimResponse::Won {
        claim_id: uuid::Uuid::from_u128(1),
        fence: 2,
        how: WonHow::RecoveredAbandoned,
        lease_ms: 30_000,
    };
    host.take();
    answer_root(&mut root, &mut host, polls[0].0, &json(&won));
    let delivered = deliver(&mut root, &mut streams, &mut host);
    assert_eq!(delivered.len(), 1, "the lease is one stream's");
    let resumed = host
        .did
        .iter()
        .filter(|a| **a == Action::ResumeRequest)
        .count();
    assert_eq!(resumed, 1, "only the winner goes upstream");
    let again = long_polls(&host);
    assert_eq!(
        again.len(),
        2,
        "the others wait on the new winner, as one: {again:?}"
    );
    assert_eq!(joined(&host), 1);
}

/// A herd larger than [`MAX_HANDED_PER_CALLBACK`] is answered over several callbacks: Envoy
/// runs each stream's reply after the callback, nested in the one before, and 500 at once
/// overflowed V8's stack (issue 48, item 9: 1,001 callers through one Envoy).
#[test]
fn a_large_herd_is_handed_its_answer_a_bounded_number_per_callback() {
    const LARGE: u32 = 150;
    let (mut root, mut host) = configured();
    let mut streams: Vec<Stream> = (1..=LARGE)
        .map(|id| claiming(&root, &mut host, id, r#"{"amount":1}"#))
        .collect();
    // The turn's claims go as several batches: each finds the request running.
    root.on_wake(&mut host);
    let running = json(&ClaimResponse::InProgress { retry_after_s: 1 });
    let batches: Vec<(u32, usize)> = host
        .dispatched
        .iter()
        .filter_map(|(token, callout)| match callout {
            Callout::Batch { calls, .. } => Some((*token, calls.len())),
            _ => None,
        })
        .collect();
    for (token, calls) in batches {
        let answers = vec![format!(r#"{{"status":200,"body":{running}}}"#); calls].join(",");
        answer_root(
            &mut root,
            &mut host,
            token,
            &format!(r#"{{"answers":[{answers}]}}"#),
        );
    }
    let polls = long_polls(&host);
    assert_eq!(polls.len(), 1, "one long-poll for the herd: {polls:?}");
    let completed = ClaimResponse::Completed {
        response: StoredResponse::new(201, Vec::new(), br#"{"id":"p-1"}"#),
    };
    host.take();
    host.wakes.clear();
    answer_root(&mut root, &mut host, polls[0].0, &json(&completed));

    let first = root.take_deliveries(&mut host);
    assert_eq!(first.len(), MAX_HANDED_PER_CALLBACK);
    assert!(root.take_deliveries(&mut host).is_empty(), "the rest wait");
    assert_eq!(host.wakes, [WAKE_QUEUE], "for a wake-up");
    root.callback_returned();
    for delivery in first {
        let index = usize::try_from(delivery.stream - 1).unwrap();
        streams[index].on_delivered(delivery.answer, &mut host);
    }
    let rest = deliver(&mut root, &mut streams, &mut host);
    assert_eq!(rest.len(), LARGE as usize - MAX_HANDED_PER_CALLBACK);
    assert_eq!(replies(&host), [201; LARGE as usize]);
}
