//! F0: no spelling of a guarded target reaches its handler unguarded. A policy matches
//! the readings a case-insensitive upstream routes by (Express, ASP.NET Core, IIS) and
//! `\` read as `/` (the spellings themselves: `unguarded.rs`); the scope and the
//! fingerprint keep the exact target; a target that is not UTF-8 is refused when any
//! reading of it could be guarded (`docs/identity.md#matching-policies`).

use super::*;
use crate::metrics::{EventKind, Outcome};

fn require_key(policy: serde_json::Value) -> Rc<Config> {
    let mut policy = policy;
    policy["require_key"] = serde_json::json!(true);
    config_with(serde_json::json!({}), policy)
}

/// The pseudo-headers of a request, byte for byte.
fn target(method: &[u8], path: &[u8], authority: &[u8]) -> Vec<(String, Vec<u8>)> {
    [
        (":method", method),
        (":path", path),
        (":authority", authority),
    ]
    .iter()
    .map(|(name, value)| ((*name).to_owned(), value.to_vec()))
    .collect()
}

#[test]
fn folding_is_unicode_wide() {
    // U+212A KELVIN SIGN lower-cases to `k`; U+017F LONG S upper-cases to `S`.
    let config = require_key(serde_json::json!({"match": {"path_prefix": "/kiosks"}}));
    for path in ["/%E2%84%AAiosks", "/kio%C5%BFks"] {
        let mut s = Harness::new(Rc::clone(&config));
        let out = s.headers(request("POST", path, &[("x-user", "alice")]), true);
        assert_eq!(reply(&out).status, 400, "{path}");
    }
}

#[test]
fn a_case_sensitive_policy_matches_only_its_own_case() {
    let config = require_key(serde_json::json!({
        "match": {"path_prefix": "/payments", "path_case": "sensitive"}
    }));
    let mut s = Harness::new(Rc::clone(&config));
    let out = s.headers(request("POST", "/PAYMENTS", &[("x-user", "alice")]), true);
    assert_eq!(
        out,
        vec![Action::ContinueRequest],
        "not this policy's route"
    );
    let mut s = Harness::new(config);
    let out = s.headers(request("POST", "/payments", &[("x-user", "alice")]), true);
    assert_eq!(reply(&out).status, 400);
}

#[test]
fn a_regex_matches_case_folded_too() {
    let config = require_key(serde_json::json!({
        "match": {"path_prefix": "/", "path_regex": "^/payments/[a-z0-9]+$"}
    }));
    let mut s = Harness::new(config);
    let out = s.headers(
        request("POST", "/PAYMENTS/ABC", &[("x-user", "alice")]),
        true,
    );
    assert_eq!(reply(&out).status, 400);
}

#[test]
fn the_scope_keeps_the_exact_target() {
    let claim = |path: &str| {
        let mut s = Harness::new(config());
        s.headers(
            request(
                "POST",
                path,
                &[("idempotency-key", KEY), ("x-user", "alice")],
            ),
            false,
        );
        let out = s.body(b"{}");
        single_call(&out)
    };
    let lower = claim("/payments");
    let upper = claim("/PAYMENTS");
    assert_ne!(lower.scope(), upper.scope(), "two targets, two operations");
}

#[test]
fn an_undecodable_target_under_a_policy_is_refused_and_counted() {
    let undecodable = Metric::Event(EventKind::TargetUndecodable);
    let cases = [
        target(b"POST", b"/payments/\xff", b"api.example.com"),
        target(b"POST", b"/x\xff/../payments", b"api.example.com"),
        target(b"POST", b"/payments", b"api.\xffexample.com"),
        target(b"P\xffST", b"/payments", b"api.example.com"),
    ];
    for mut headers in cases {
        headers.push(h("idempotency-key", KEY));
        headers.push(h("x-user", "alice"));
        let mut s = Harness::new(config_with(
            serde_json::json!({}),
            serde_json::json!({"match": {"path_prefix": "/payments", "authority": "api.example.com"}}),
        ));
        let out = s.headers(headers.clone(), true);
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str()),
            (400, "bad_request"),
            "{headers:?}"
        );
        assert!(counts(&out).contains(&undecodable), "{out:?}");
        assert!(counts(&out).contains(&Metric::Outcome(Outcome::RejectedInvalid)));
        assert!(calls(&out).is_empty());
    }
}

#[test]
fn an_undecodable_target_no_policy_could_guard_passes_but_is_counted() {
    let mut s = Harness::new(config());
    let headers = target(b"POST", b"/other/\xff", b"api.example.com");
    let out = s.headers(headers, true);
    assert_eq!(
        out,
        vec![
            Action::Count(Metric::Event(EventKind::TargetUndecodable)),
            Action::ContinueRequest
        ]
    );
}
