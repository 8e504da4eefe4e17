//! F0: policies match on every reading of the path an upstream could route by, and on the
//! normalized authority, so `require_key` (and guarding itself) cannot be bypassed by
//! spelling the target differently: `//payments`, `/x/../payments`, `/x/%2e%2e/payments`,
//! `/%70ayments`, `/PAYMENTS`, `/x\..\payments`, an upper-case host, a trailing dot or a
//! port; and a target that is not UTF-8 (over HTTP/2) never reaches the upstream
//! unguarded. The requests are written byte for byte ([`keyflight_e2e::raw_http`]): an
//! HTTP client library would resolve the dot segments before sending.

use keyflight_e2e::{Reply, Stack, StackOptions, raw_http};
use serde_json::json;

const BODY: &[u8] = br#"{"amount":5}"#;

/// A payment as alice, written byte for byte, with a key when given.
async fn post(port: u16, target: &str, host: &str, key: Option<&str>) -> Reply {
    let mut headers = vec![
        ("host", host),
        ("x-user", "alice"),
        ("content-type", "application/json"),
    ];
    if let Some(key) = key {
        headers.push(("idempotency-key", key));
    }
    raw_http::send(port, "POST", target, &headers, BODY).await
}

fn require_key(authority: Option<&str>) -> StackOptions {
    StackOptions::default().policy(|policy| {
        policy.insert("require_key".into(), json!(true));
        if let Some(authority) = authority {
            policy["match"]["authority"] = json!(authority);
        }
    })
}

#[tokio::test]
async fn respelled_paths_still_require_a_key() {
    respelled_paths_still_require_a_key_on(require_key(None)).await;
}

/// The same under the native adapter (`filter-native/`): it reads the same headers.
#[tokio::test]
async fn respelled_paths_still_require_a_key_under_the_native_adapter() {
    respelled_paths_still_require_a_key_on(require_key(None).native_adapter()).await;
}

async fn respelled_paths_still_require_a_key_on(options: StackOptions) {
    let stack = Stack::start(options).await;
    let port = stack.listener_port(0);
    for target in [
        "/payments",
        "//payments",
        "/x/../payments",
        "/x/%2e%2E/payments",
        "/%70ayments",
        "/./payments",
        "/x%2F..%2Fpayments",
        // Express, ASP.NET Core and IIS route these to the /payments handler; Envoy
        // forwards each byte for byte (docs/envoy-facts.md#request-targets).
        "/PAYMENTS",
        "/Payments/42",
        "/%50ayments",
        "/x/..\\PAYMENTS",
        "/x%5C..%5Cpayments",
    ] {
        post(port, target, "127.0.0.1", None)
            .await
            .assert_problem(400, "idempotency_key_required");
    }
    assert_eq!(stack.upstream_executions().await, 0, "nothing got through");
}

#[tokio::test]
async fn a_respelled_path_is_guarded_and_its_retry_replays() {
    let stack = Stack::start(require_key(None)).await;
    let port = stack.listener_port(0);
    let first = post(port, "//payments", "127.0.0.1", Some("k")).await;
    let retry = post(port, "//payments", "127.0.0.1", Some("k")).await;
    assert_eq!(
        retry.header("idempotent-replayed"),
        Some("true"),
        "{first}\n{retry}"
    );
    assert_eq!((retry.status, &retry.body), (first.status, &first.body));
    assert!(stack.upstream_executions().await <= 1);
}

#[tokio::test]
async fn respelled_authorities_still_match_the_policy_and_share_a_scope() {
    let stack = Stack::start(require_key(Some("payments.example"))).await;
    let port = stack.listener_port(0);
    for host in [
        "payments.example",
        "PAYMENTS.Example",
        "payments.example.",
        "payments.example:80",
        "payments.example:8080",
    ] {
        post(port, "/payments", host, None)
            .await
            .assert_problem(400, "idempotency_key_required");
    }
    // Another host is another policy's business: this one passes unguarded.
    let elsewhere = post(port, "/payments", "billing.example", None).await;
    assert_eq!(elsewhere.status, 201, "{elsewhere}");

    // The scope hashes the normalized authority: the respelled retry replays (the
    // listener speaks plain HTTP, so :80 is the default port).
    let first = post(port, "/payments", "payments.example", Some("k")).await;
    let retry = post(port, "/payments", "PAYMENTS.example.:80", Some("k")).await;
    assert_eq!(first.status, 201, "{first}");
    retry.assert_replayed();
    assert_eq!(retry.body, first.body);
    let other_port = post(port, "/payments", "payments.example:8080", Some("k")).await;
    assert_eq!(
        other_port.header("idempotent-replayed"),
        None,
        "another port, another scope: {other_port}"
    );
}

#[tokio::test]
async fn a_target_that_is_not_utf8_never_reaches_the_upstream_unguarded() {
    let stack = Stack::start(require_key(None)).await;
    let port = stack.listener_port(0);
    let keyed: [(&[u8], &[u8]); 2] = [(b"idempotency-key", b"k"), (b"x-user", b"alice")];
    // HTTP/1.1: Envoy's codec answers 400 itself, before any filter.
    for (method, target, host) in [
        (&b"POST"[..], &b"/payments/\xff"[..], &b"127.0.0.1"[..]),
        (b"POST", b"/payments", b"api.\xffexample"),
        (b"P\xffST", b"/payments", b"127.0.0.1"),
    ] {
        let mut headers = vec![(&b"host"[..], host)];
        headers.extend(keyed);
        let reply = raw_http::send_bytes(port, method, target, &headers, BODY).await;
        assert_eq!(reply.status, 400, "{reply}");
    }
    // HTTP/2: Envoy forwards a `:path` that is not UTF-8 as it came; the filter refuses it.
    for path in [&b"/payments/\xff"[..], b"/x\xff/../payments"] {
        let mut headers: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path),
            (b":authority", b"127.0.0.1"),
        ];
        headers.extend(keyed);
        let answer = raw_http::send_h2(port, &headers).await;
        let body = String::from_utf8_lossy(&answer.body);
        assert!(
            answer.answered && body.contains("\"code\":\"bad_request\""),
            "{:?}: {answer:?} {body}",
            String::from_utf8_lossy(path)
        );
    }
    // A path no policy could guard passes: the filter only refuses what it cannot tell apart.
    let headers: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/other/\xff"),
        (b":authority", b"127.0.0.1"),
    ];
    let answer = raw_http::send_h2(port, &headers).await;
    assert!(
        answer.answered && !String::from_utf8_lossy(&answer.body).contains("bad_request"),
        "{answer:?}"
    );
    assert_eq!(stack.upstream_executions().await, 0, "no payment ran");
    assert_eq!(
        stack.filter_counter("event.target_undecodable").await,
        3,
        "each HTTP/2 target the filter could not read is counted"
    );
}
