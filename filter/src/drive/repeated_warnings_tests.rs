//! A store outage fails every guarded request's claim alike: the worker logs one warning
//! per interval, says in the next one how many it held back, and counts every request
//! (`docs/stream-machine.md#logs`).

use super::stream::{Callback, Stream};
use super::worker::Root;

use crate::drive::host::LogLevel;
use crate::machine::Action;
use crate::metrics::{Metric, Outcome};
use crate::testing::FakeHost;

fn configured() -> (Root, FakeHost) {
    let plugin = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000,
                        "coalesce_calls": false},
        "identity": {"principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"}}]
    });
    let mut host = FakeHost {
        now_ms: 1_000_000,
        plugin_configuration: plugin.to_string().into_bytes(),
        // No healthy lease-store host: every claim fails at once.
        refuse_dispatch: true,
        ..FakeHost::default()
    };
    let mut root = Root::default();
    assert!(root.configure(&mut host));
    host.take();
    (root, host)
}

/// A guarded POST with key `key` on a new stream of `root`; its claim fails.
fn guarded(root: &Root, host: &mut FakeHost, id: u32, key: &str) {
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
}

fn claim_failed_warnings(did: &[Action]) -> Vec<String> {
    did.iter()
        .filter_map(|a| match a {
            Action::Log {
                level: LogLevel::Warn,
                message,
            } if message.contains("lease-store claim failed") => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn unavailable(did: &[Action]) -> usize {
    did.iter()
        .filter(|a| {
            matches!(
                a,
                Action::Count(Metric::Outcome(Outcome::JournalUnavailable))
            )
        })
        .count()
}

#[test]
fn failed_claims_inside_one_interval_warn_once_then_say_how_many_were_held_back() {
    let (root, mut host) = configured();
    for n in 0..5 {
        guarded(&root, &mut host, n, &format!("k-{n}"));
        host.now_ms += 100;
    }
    let did = host.take();
    let warnings = claim_failed_warnings(&did);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(!warnings[0].contains("not logged"), "{}", warnings[0]);
    assert_eq!(unavailable(&did), 5, "every request is counted");

    // The interval is over: the next failure is logged, with the four held back.
    host.now_ms += 1000;
    guarded(&root, &mut host, 5, "k-5");
    let did = host.take();
    let warnings = claim_failed_warnings(&did);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].ends_with("(4 more like it since the last one, not logged)"),
        "{}",
        warnings[0]
    );
    assert_eq!(unavailable(&did), 1);
}
