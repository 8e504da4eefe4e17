//! F8 through the whole machine: a header that breaks the recorded-header
//! rule is never recorded and never replayed, wherever the record came from.
//!
//! The lease-store refuses such headers, so a store answer that holds one
//! means the record was written some other way (an older store, a row edited
//! by hand). The filter must still not smuggle it into a reply: these tests
//! feed such records to the machine from the store's claim answer and from
//! the edge cache, and feed such headers from the upstream, and look at what
//! comes out.

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use keyflight_filter::identity::Lookup;
use keyflight_protocol::PrincipalSource;
use std::rc::Rc;

use keyflight_filter::config::Config;
use keyflight_filter::edge_cache::Entry;
use keyflight_filter::machine::{Action, Event, Machine};
use keyflight_filter::parse_plugin_config;
use keyflight_filter::problem::LocalReply;
use keyflight_filter::status_matrix::ResponseOrigin;
use keyflight_filter::store_call::{Answer, StoreCall};
use keyflight_protocol::wire::{ClaimResponse, StoredResponse, WonHow};

const BODY: &[u8] = br#"{"amount":1}"#;
/// The operator epoch the worker has heard (F9).
const EPOCH: u64 = 1;
const NOW_MS: u64 = 1_000_000;

/// The demo policy; `location`, `etag`, `content-language` are allowlisted by default.
fn config() -> Rc<Config> {
    let json = serde_json::json!({
        "lease_store": {"cluster": "keyflight_lease_store", "authority": "lease-store",
                        "token": "t", "timeout_ms": 1000},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments",
                      "match": {"methods": ["POST"], "path_prefix": "/payments"},
                      "replay_headers": ["x-signature"]}]
    });
    Rc::new(parse_plugin_config(json.to_string().as_bytes()).unwrap())
}

/// Allowlisted names whose values are not field-values, never-stored names,
/// and one header that is fine.
fn bad_and_good_headers() -> Vec<(String, String)> {
    [
        ("location", "/payments/1\r\nset-cookie: stolen=1"),
        ("etag", "\"v1\"\u{0}"),
        ("content-language", "en\u{7f}"),
        ("x-signature", " padded"),
        ("set-cookie", "session=victim"),
        ("cookie", "session=victim"),
        ("content-type", "application/json"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
    .collect()
}

fn request_headers() -> Vec<(String, Vec<u8>)> {
    [
        (":authority", "shop.test"),
        (":path", "/payments"),
        (":method", "POST"),
        ("x-user", "alice"),
        ("content-type", "application/json"),
        ("idempotency-key", "k-1"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect()
}

/// Drives a keyed request up to its edge-cache read; returns the machine.
fn machine_at_cache_read() -> Machine {
    let mut machine = Machine::new(config());
    machine.on(Event::RequestHeaders {
        headers: request_headers(),
        principal: Lookup::Found {
            source: std::rc::Rc::new(PrincipalSource::Header("x-user".into())),
            name: "alice".to_owned(),
        },
        previous_principal: None,
        end_of_stream: false,
    });
    machine.on(Event::RequestBodyChunk {
        buffered_bytes: BODY.len(),
        end_of_stream: true,
    });
    let actions = machine.on(Event::RequestBodyComplete {
        body: BODY.to_vec(),
    });
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ReadEdgeCache { .. })),
        "the demo policy reads the edge cache first: {actions:?}"
    );
    machine
}

/// The claim in flight answers `response`, as the lease-store sends it.
fn answered(response: &ClaimResponse) -> Event {
    Event::StoreAnswered {
        answer: Answer::ok(serde_json::to_vec(response).unwrap()),
        elapsed_ms: 1,
    }
}

fn reply(actions: &[Action]) -> &LocalReply {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Reply(reply) => Some(reply),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply in {actions:?}"))
}

fn assert_only_the_good_headers(reply: &LocalReply) {
    assert_eq!(reply.status, 201);
    assert_eq!(
        reply.headers,
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("idempotent-replayed".to_owned(), "true".to_owned()),
        ],
        "only the header that passes the rule is replayed"
    );
}

#[test]
fn a_store_record_with_bad_headers_replays_without_them() {
    let mut machine = machine_at_cache_read();
    let actions = machine.on(Event::EdgeCacheRead {
        slot: None,
        now_ms: NOW_MS,
        epoch: Some(EPOCH),
    });
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::CallStore {
                call: StoreCall::Claim { .. },
                ..
            }
        )),
        "{actions:?}"
    );
    let actions = machine.on(answered(&ClaimResponse::Completed {
        response: StoredResponse::new(201, bad_and_good_headers(), b"{\"id\":1}"),
    }));
    assert_only_the_good_headers(reply(&actions));
}

#[test]
fn an_edge_cache_entry_with_bad_headers_replays_without_them() {
    let mut machine = machine_at_cache_read();
    // The cache slot's scope and fingerprint must match: take them from the
    // claim the machine would make on a miss.
    let (scope, fingerprint) = {
        let mut probe = machine_at_cache_read();
        let actions = probe.on(Event::EdgeCacheRead {
            slot: None,
            now_ms: NOW_MS,
            epoch: Some(EPOCH),
        });
        actions
            .iter()
            .find_map(|a| match a {
                Action::CallStore {
                    call: StoreCall::Claim { scope, request },
                    ..
                } => Some((*scope, request.fingerprint)),
                _ => None,
            })
            .unwrap()
    };
    let slot = Entry {
        scope,
        fingerprint,
        epoch: EPOCH,
        expires_at_ms: NOW_MS + 60_000,
        response: StoredResponse {
            status: 201,
            headers: bad_and_good_headers(),
            body: b"{\"id\":1}".to_vec(),
        },
    }
    .encode_at(NOW_MS - 1)
    .unwrap();
    let actions = machine.on(Event::EdgeCacheRead {
        slot: Some(slot),
        now_ms: NOW_MS,
        epoch: Some(EPOCH),
    });
    assert_only_the_good_headers(reply(&actions));
}

#[test]
fn upstream_headers_that_break_the_rule_are_not_recorded() {
    let mut machine = machine_at_cache_read();
    machine.on(Event::EdgeCacheRead {
        slot: None,
        now_ms: NOW_MS,
        epoch: Some(EPOCH),
    });
    machine.on(answered(&ClaimResponse::Won {
        claim_id: uuid::Uuid::nil(),
        fence: 1,
        how: WonHow::Claimed,
        lease_ms: 30_000,
    }));
    machine.on(Event::ResponseHeaders {
        end_of_stream: false,
    });
    let upstream: Vec<(String, Vec<u8>)> = bad_and_good_headers()
        .into_iter()
        .map(|(n, v)| (n, v.into_bytes()))
        .chain([("etag".to_owned(), vec![b'"', 0xff, b'"'])])
        .collect();
    machine.on(Event::ResponseHeadersRead {
        status: 201,
        headers: upstream,
        origin: ResponseOrigin::Upstream,
        end_of_stream: false,
    });
    machine.on(Event::ResponseBodyChunk {
        buffered_bytes: 8,
        end_of_stream: true,
    });
    let actions = machine.on(Event::ResponseBodyComplete {
        body: b"{\"id\":1}".to_vec(),
    });
    let recorded = actions
        .iter()
        .find_map(|a| match a {
            Action::CallStore {
                call: StoreCall::Finalize { request, .. },
                ..
            } => Some(request.response.headers.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no finalize in {actions:?}"));
    assert_eq!(
        recorded,
        vec![("content-type".to_owned(), "application/json".to_owned())]
    );
}
