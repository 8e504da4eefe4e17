//! The claim: what it carries, when it is made, and what a won claim does
//! to the request it forwards.

use super::*;
use crate::encoding;
use crate::machine::{FENCE_HEADER, SCOPE_HEADER};
use crate::metrics::EventKind;
use crate::store_call::StoreCall;

#[test]
fn the_claim_carries_fingerprint_lease_wait_and_retention() {
    let mut s = Harness::new(config());
    s.headers(keyed(), false);
    let out = s.body(b"{}");
    let [
        Action::ReadRequestBody { size: 2 },
        Action::CallStore { call, timeout },
        Action::PauseRequest,
    ] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!(*timeout, Duration::from_millis(6000));
    let StoreCall::Claim { request, .. } = call else {
        panic!("{call:?}")
    };
    assert_eq!(request.lease_ms, 30_000);
    assert_eq!(request.wait_ms, Some(5000));
    assert_eq!(request.retention_s, Some(86_400));
    // The request stays held while the claim is in flight.
    assert_eq!(
        s.request(Callback::RequestTrailers),
        vec![Action::PauseRequest]
    );
}

#[test]
fn only_a_retry_policys_claim_is_at_least_once() {
    for (policy, at_most_once) in [
        (serde_json::json!({}), true),
        (serde_json::json!({"uncertain": "retry"}), false),
        (serde_json::json!({"uncertain": "hold"}), true),
        (serde_json::json!({"uncertain": "record"}), true),
    ] {
        let config = config_with(serde_json::json!({}), policy.clone());
        let StoreCall::Claim { request, .. } = Harness::new(config).drive_to_claim(b"{}") else {
            panic!("no claim for {policy}")
        };
        assert_eq!(request.at_most_once, at_most_once, "{policy}");
    }
}

#[test]
fn the_fingerprint_depends_on_the_body_and_scope_on_the_key() {
    let claim = |body: &[u8]| match Harness::new(config()).drive_to_claim(body) {
        StoreCall::Claim { scope, request } => (scope, request.fingerprint),
        other => panic!("{other:?}"),
    };
    let (scope_a, fp_a) = claim(br#"{"amount":10}"#);
    let (scope_b, fp_b) = claim(br#"{"amount":11}"#);
    let (_, fp_c) = claim(br#"{ "amount" : 10 }"#);
    assert_eq!(scope_a, scope_b);
    assert_ne!(fp_a, fp_b);
    assert_eq!(fp_a, fp_c, "JSON bodies are canonicalized (K4)");
}

#[test]
fn a_bodyless_request_claims_from_the_headers_callback() {
    let mut s = Harness::new(config());
    let out = s.headers(keyed(), true);
    assert_eq!(calls(&out).len(), 1);
    assert_eq!(out.last(), Some(&Action::PauseRequest));
}

#[test]
fn trailers_end_a_buffered_request_body() {
    let mut s = Harness::new(config());
    s.headers(keyed(), false);
    s.chunk(5, false);
    s.host.request_body = b"{\"a\":1}"[..5].to_vec();
    let out = s.request(Callback::RequestTrailers);
    assert_eq!(out.first(), Some(&Action::ReadRequestBody { size: 5 }));
    assert!(
        matches!(calls(&out).as_slice(), [StoreCall::Claim { .. }]),
        "{out:?}"
    );
    assert_eq!(out.last(), Some(&Action::PauseRequest));
}

#[test]
fn won_forwards_with_the_fence_and_starts_renewal() {
    for (how, event) in [
        (WonHow::Claimed, EventKind::Claimed),
        (WonHow::RecoveredTtl, EventKind::RecoveredTtl),
        (WonHow::RecoveredAbandoned, EventKind::RecoveredAbandoned),
    ] {
        let mut s = Harness::new(config());
        let StoreCall::Claim { scope, .. } = s.drive_to_claim(b"{}") else {
            panic!()
        };
        let out = s.claim_answer(&ClaimResponse::Won {
            claim_id: CLAIM,
            fence: 41,
            how,
            lease_ms: 30_000,
        });
        assert_eq!(
            out,
            vec![
                Action::Count(Metric::Event(event)),
                Action::SetRequestHeader {
                    name: "idempotency-fence".into(),
                    value: Some("41".into())
                },
                // The effect ledger's key (`docs/effects.md`).
                Action::SetRequestHeader {
                    name: "idempotency-scope".into(),
                    value: Some(scope.to_hex())
                },
                // F8: the recorded answer must decode for every client.
                Action::SetRequestHeader {
                    name: "accept-encoding".into(),
                    value: Some("identity".into())
                },
                Action::SetRequestHeader {
                    name: "x-envoy-max-retries".into(),
                    value: Some("0".into())
                },
                Action::ResumeRequest,
            ]
        );
        // The worker's outbox renews the lease every interval (a third of it).
        assert_eq!(
            s.held(),
            Some(Held {
                renewing: true,
                delivery: None
            })
        );
        let mut outbox = s.worker.outbox();
        assert!(outbox.on_tick(NOW_MS + 9_999).is_empty());
        let renew = outbox.on_tick(NOW_MS + 10_000);
        let [crate::outbox::OutboxAction::Dispatch { call, .. }] = renew.as_slice() else {
            panic!("{renew:?}")
        };
        let StoreCall::Renew {
            scope: renewed,
            request,
        } = call
        else {
            panic!("{call:?}")
        };
        assert_eq!(
            (*renewed, request.claim_id, request.lease_ms),
            (scope, CLAIM, 30_000)
        );
    }
}

/// The request header edits a won claim makes before it resumes the request.
fn forwarded_header_edits(config: Rc<Config>) -> Vec<(String, Option<String>)> {
    let mut s = Harness::new(config);
    s.drive_to_claim(b"{}");
    s.claim_answer(&won(3))
        .into_iter()
        .filter_map(|action| match action {
            Action::SetRequestHeader { name, value }
                if name != FENCE_HEADER
                    && name != SCOPE_HEADER
                    && name != encoding::ACCEPT_ENCODING =>
            {
                Some((name, value))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn by_default_the_router_may_not_retry_a_forwarded_request() {
    assert_eq!(
        forwarded_header_edits(config()),
        vec![("x-envoy-max-retries".to_owned(), Some("0".to_owned()))]
    );
}

#[test]
fn router_retries_route_keeps_the_route_policy_and_drops_caller_retry_headers() {
    let edits = forwarded_header_edits(config_with(
        serde_json::json!({}),
        serde_json::json!({"router_retries": "route"}),
    ));
    assert_eq!(
        edits,
        vec![
            ("x-envoy-retry-on".to_owned(), None),
            ("x-envoy-retry-grpc-on".to_owned(), None),
            ("x-envoy-hedge-on-per-try-timeout".to_owned(), None),
        ]
    );
}
