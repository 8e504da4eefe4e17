//! What the pure half of an edge-cache replay costs, step by step (the replay row, P2, of
//! `make bench`: `bench/README.md`).
//!
//! A replay served from the edge cache runs, per request: the request-headers
//! decision (target normalization, policy match, key validation), the scope
//! and the fingerprint of the body (JCS for a JSON body), the slot decode and
//! scope/fingerprint compare, and the replay reply. This file times those steps natively, so a
//! compute hot spot shows up independent of Envoy, V8 and the noise of a
//! shared machine. It also checks, as a plain test, that the path it times is
//! really the hit path.
//!
//! Run the timings with
//! `cargo test --release -p keyflight-filter --test hit_path_cost -- --ignored --nocapture`.
//! Native numbers are not V8's, but their proportions point at what to cut.

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::hint::black_box;
use std::rc::Rc;
use std::time::Instant;

use keyflight_filter::config::Config;
use keyflight_filter::edge_cache::{self, Entry};
use keyflight_filter::identity::Lookup;
use keyflight_filter::machine::{Action, Event, Machine};
use keyflight_filter::parse_plugin_config;
use keyflight_protocol::wire::StoredResponse;
use keyflight_protocol::{
    Digest, Principal, PrincipalSource, RequestHead, Rules, ScopeMode, Target,
};

const BODY: &[u8] = br#"{"amount":1,"currency":"EUR"}"#;
const NOW_MS: u64 = 1_000_000;
/// The operator epoch the worker has heard (F9).
const EPOCH: u64 = 1;

/// The demo stack's plugin configuration (envoy/demo.yaml), edge cache on by default.
fn config() -> Rc<Config> {
    let json = serde_json::json!({
        "lease_store": {"cluster": "keyflight_lease_store", "authority": "lease-store",
                        "token": "demo-filter-token", "timeout_ms": 1000},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments",
                      "match": {"methods": ["POST"], "path_prefix": "/payments"},
                      "scope": "route", "lease_ms": 30000, "follower_wait_ms": 5000}]
    });
    Rc::new(
        parse_plugin_config(json.to_string().as_bytes()).expect("the demo configuration is valid"),
    )
}

/// The headers the bench's replay sends, as Envoy hands them to the filter.
fn headers() -> Vec<(String, Vec<u8>)> {
    [
        (":authority", "127.0.0.1:10000"),
        (":path", "/payments"),
        (":method", "POST"),
        (":scheme", "http"),
        ("x-user", "alice"),
        ("content-type", "application/json"),
        ("idempotency-key", "replay-1"),
        ("content-length", "29"),
        ("x-forwarded-proto", "http"),
        ("x-request-id", "6f1c4c36-3f64-4c4e-9a5e-1d1f8d3c0b2a"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect()
}

/// The request's head as the machine reads it.
fn head() -> RequestHead {
    let headers = headers();
    let target = Target::from_headers(&headers).expect("pseudo-headers");
    let names = ["if-match".to_owned(), "x-approval-digest".to_owned()];
    let rules = Rules {
        key_header: "idempotency-key",
        fingerprint_headers: &names,
    };
    RequestHead::read(target, &headers, &rules).expect("a valid key")
}

/// The scope and fingerprint of the replayed request, from its head.
fn request_identity(head: &RequestHead) -> (Digest, Digest) {
    let source = PrincipalSource::Header("x-user".into());
    let principal = Principal::Named {
        source: &source,
        name: "alice",
    };
    let id = head.identify(principal, ScopeMode::Route, BODY);
    (
        id.scope.expect("a keyed request"),
        id.explanation.fingerprint,
    )
}

/// The slot the first (recorded) request left behind.
fn slot() -> Vec<u8> {
    let (scope, fingerprint) = request_identity(&head());
    Entry {
        scope,
        fingerprint,
        epoch: EPOCH,
        expires_at_ms: NOW_MS + 60_000,
        response: StoredResponse {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"payment_id":"p-000001","amount":1,"currency":"EUR"}"#.to_vec(),
        },
    }
    .encode_at(NOW_MS - 1)
    .expect("the entry fits its length prefixes")
}

/// One replay through the machine, as the adapter drives it; returns the reply's status.
fn replay_once(config: &Rc<Config>, slot: &[u8]) -> u16 {
    let mut machine = Machine::new(Rc::clone(config));
    machine.on(Event::RequestHeaders {
        headers: headers(),
        principal: Lookup::Found {
            source: Rc::new(PrincipalSource::Header("x-user".into())),
            name: "alice".to_owned(),
        },
        previous_principal: None,
        end_of_stream: false,
    });
    machine.on(Event::RequestBodyChunk {
        buffered_bytes: BODY.len(),
        end_of_stream: true,
    });
    machine.on(Event::RequestBodyComplete {
        body: BODY.to_vec(),
    });
    let actions = machine.on(Event::EdgeCacheRead {
        slot: Some(slot.to_vec()),
        now_ms: NOW_MS,
        epoch: Some(EPOCH),
    });
    actions
        .iter()
        .find_map(|a| match a {
            Action::Reply(reply) => Some(reply.status),
            _ => None,
        })
        .unwrap_or(0)
}

/// Mean wall time of `f` over enough rounds to be readable.
fn time<T>(name: &str, mut f: impl FnMut() -> T) {
    const ROUNDS: u32 = 200_000;
    for _ in 0..ROUNDS / 10 {
        black_box(f());
    }
    let start = Instant::now();
    for _ in 0..ROUNDS {
        black_box(f());
    }
    let each = start.elapsed() / ROUNDS;
    println!("{name:<40} {:>8.2} µs", each.as_secs_f64() * 1e6);
}

#[test]
fn the_timed_path_is_an_edge_cache_hit() {
    assert_eq!(replay_once(&config(), &slot()), 201);
}

#[test]
#[ignore = "timing, not a check: run with --ignored --nocapture"]
fn hit_path_cost() {
    let config = config();
    let slot = slot();
    let head = head();
    let (scope, fp) = request_identity(&head);
    time("whole replay through the machine", || {
        replay_once(&config, &slot)
    });
    time("request head (target, key, media type)", self::head);
    time("scope + fingerprint (JCS body)", || request_identity(&head));
    time("JCS canonicalization alone", || {
        keyflight_protocol::json::canonicalize(BODY)
    });
    time("slot decode + compare", || {
        edge_cache::lookup(Some(&slot), &scope, &fp, NOW_MS, EPOCH)
    });
}
