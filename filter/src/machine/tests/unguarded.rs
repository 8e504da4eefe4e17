//! Requests no policy guards, or that a policy lets through unguarded.

use super::*;
use crate::machine::{FENCE_HEADER, SCOPE_HEADER};
use crate::metrics::Outcome;

#[test]
fn a_request_matching_no_policy_passes_untouched() {
    let mut s = Harness::new(config());
    let headers = request(
        "POST",
        "/other",
        &[("idempotency-key", KEY), ("x-user", "alice")],
    );
    assert_eq!(s.headers(headers, false), vec![Action::ContinueRequest]);
    assert_eq!(s.chunk(10, true), vec![Action::ContinueRequest]);
    assert_eq!(
        s.response(Callback::ResponseHeaders {
            end_of_stream: true
        }),
        vec![Action::ContinueResponse]
    );
    assert_eq!(s.host.head_reads, 0, "an unguarded response is not read");
}

#[test]
fn only_a_response_to_record_is_read() {
    let mut s = to_upstream(config());
    let out = s.respond(201, true);
    assert_eq!(s.host.head_reads, 1, "the head is read once, when recorded");
    assert_eq!(calls(&out).len(), 1, "recorded: {out:?}");
    assert_eq!(out.last(), Some(&Action::PauseResponse));
}

#[test]
fn a_guarded_route_without_a_key_passes_unguarded() {
    let mut s = Harness::new(config());
    let out = s.headers(request("POST", "/payments", &[("x-user", "alice")]), false);
    assert_eq!(
        out,
        vec![
            Action::Count(Metric::Outcome(Outcome::Unguarded)),
            Action::ContinueRequest
        ]
    );
    assert_eq!(s.respond(500, true), vec![Action::ContinueResponse]);
}

#[test]
fn a_client_sent_fence_is_always_removed() {
    let mut s = Harness::new(config());
    let out = s.headers(request("GET", "/", &[("idempotency-fence", "999")]), true);
    assert_eq!(
        out,
        vec![
            Action::SetRequestHeader {
                name: FENCE_HEADER.into(),
                value: None
            },
            Action::ContinueRequest
        ]
    );
}

#[test]
fn a_client_sent_scope_is_always_removed() {
    // A forged scope would let a caller pick another operation's effect record
    // (`docs/effects.md#what-the-filter-forwards`).
    let mut s = Harness::new(config());
    let forged = [("idempotency-scope", "00"), ("Idempotency-Fence", "7")];
    let out = s.headers(request("GET", "/", &forged), true);
    assert_eq!(
        out,
        vec![
            Action::SetRequestHeader {
                name: FENCE_HEADER.into(),
                value: None
            },
            Action::SetRequestHeader {
                name: SCOPE_HEADER.into(),
                value: None
            },
            Action::ContinueRequest
        ]
    );
}

#[test]
fn respelled_paths_are_guarded_like_the_policy_path() {
    // Case and backslash respellings too: Express, ASP.NET Core and IIS route them to
    // the /payments handler (`docs/identity.md#matching-policies`).
    for path in [
        "//payments",
        "/x/../payments",
        "/%70ayments",
        "/PAYMENTS",
        "/Payments/42",
        "/%50ayments",
        "/x/..\\PAYMENTS",
        "/x%5C..%5Cpayments",
        "/\u{212A}elvin/../payments",
    ] {
        let mut s = Harness::new(config());
        let out = s.headers(request("POST", path, &[("x-user", "alice")]), true);
        // Guarded: a keyless request is counted as such, not passed silently.
        assert_eq!(
            counts(&out),
            vec![Metric::Outcome(Outcome::Unguarded)],
            "{path}"
        );
        let mut s = Harness::new(config_with(
            serde_json::json!({}),
            serde_json::json!({"require_key": true}),
        ));
        let out = s.headers(request("POST", path, &[("x-user", "alice")]), true);
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str()),
            (400, "idempotency_key_required"),
            "{path}"
        );
    }
}
