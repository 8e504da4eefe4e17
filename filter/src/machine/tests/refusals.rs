//! Refusals before the claim: the key, the principal, the body's size.

use keyflight_protocol::problem::PROBLEM_CONTENT_TYPE;

use super::*;
use crate::metrics::Outcome;

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
    for (mut extra, want) in cases {
        extra.push(("x-user", "alice"));
        let mut s = Harness::new(config());
        let out = s.headers(request("POST", "/payments", &extra), false);
        let r = reply(&out);
        assert_eq!((r.status, code(r).as_str()), (400, want), "{extra:?}");
        assert_eq!(header(r, "content-type"), Some(PROBLEM_CONTENT_TYPE));
        assert_eq!(out.last(), Some(&Action::PauseRequest));
        assert!(counts(&out).contains(&Metric::Outcome(Outcome::RejectedInvalid)));
        assert!(calls(&out).is_empty());
        assert_eq!(s.chunk(3, true), vec![Action::PauseRequest]);
    }
}

#[test]
fn require_key_refuses_a_request_without_one() {
    let mut s = Harness::new(config_with(
        serde_json::json!({}),
        serde_json::json!({"require_key": true}),
    ));
    let out = s.headers(request("POST", "/payments", &[("x-user", "alice")]), true);
    let r = reply(&out);
    assert_eq!(
        (r.status, code(r).as_str()),
        (400, "idempotency_key_required")
    );
}

/// A keyed POST with no user source is refused 401 and claims nothing.
fn assert_principal_required(s: &mut Harness) {
    let out = s.headers(
        request("POST", "/payments", &[("idempotency-key", KEY)]),
        true,
    );
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (401, "principal_required"));
    assert!(calls(&out).is_empty());
}

#[test]
fn a_keyed_request_without_principal_is_401() {
    let mut s = Harness::new(config());
    assert_principal_required(&mut s);
}

#[test]
fn a_principal_source_that_names_no_single_principal_is_400() {
    let mut s = Harness::new(config());
    let mut headers = keyed();
    headers.push(h("x-user", "mallory"));
    let out = s.headers(headers, true);
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (400, "principal_ambiguous"));
    assert!(calls(&out).is_empty());
    assert_eq!(
        counts(&out),
        vec![Metric::Outcome(Outcome::RejectedInvalid)]
    );
}

#[test]
fn anonymous_shared_claims_in_one_shared_scope() {
    let config = config_with(
        serde_json::json!({}),
        serde_json::json!({"anonymous": "shared"}),
    );
    let scope_of = |principal: Option<&str>| {
        let mut extra = vec![("idempotency-key", KEY)];
        extra.extend(principal.map(|p| ("x-user", p)));
        let mut s = Harness::new(Rc::clone(&config));
        let out = s.headers(request("POST", "/payments", &extra), true);
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
    let mut s = Harness::new(Rc::clone(&config));
    let mut headers = keyed();
    headers.push(h("content-length", "9"));
    let out = s.headers(headers, false);
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (413, "payload_too_large"));
    // Counted while buffering.
    let mut s = Harness::new(Rc::clone(&config));
    s.headers(keyed(), false);
    assert_eq!(s.chunk(8, false), vec![Action::PauseRequest]);
    let out = s.chunk(9, false);
    assert_eq!(reply(&out).status, 413);
    assert_eq!(out.last(), Some(&Action::PauseRequest));
    // Exactly at the cap is fine.
    let mut s = Harness::new(config);
    s.headers(keyed(), false);
    let out = s.body(&[b'x'; 8]);
    assert_eq!(calls(&out).len(), 1);
}

#[test]
fn a_request_whose_only_principal_is_a_not_principals_peer_is_401() {
    let gateway = "spiffe://cluster.local/ns/istio-ingress/sa/istio-ingressgateway";
    let config = config_with(
        serde_json::json!({"identity": {
            "principal": [
                {"header": "x-user"},
                {"property": ["connection", "uri_san_peer_certificate"]}
            ],
            "not_principals": [gateway]
        }}),
        serde_json::json!({}),
    );
    let mut s = Harness::new(config);
    s.host.properties.insert(
        vec!["connection".into(), "uri_san_peer_certificate".into()],
        gateway.as_bytes().to_vec(),
    );
    assert_principal_required(&mut s);
}
