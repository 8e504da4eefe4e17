//! The body-digest memo: a byte-identical large JSON body is not canonicalized
//! again, and nothing the memo holds can give a body another's fingerprint
//! (`docs/stream-machine.md#the-body-digest-memo`).

use keyflight_protocol::fingerprint::{BodyDigest, DEFAULT_FINGERPRINT_HEADERS};
use keyflight_protocol::{Principal, RequestHead, Rules, ScopeMode, Target};

use super::*;
use crate::body_memo::{self, MIN_BODY_BYTES, RawDigest};
use crate::metrics::EventKind;

/// A JSON body of at least [`MIN_BODY_BYTES`], spelled with `gap` between
/// its members: every `gap` gives the same canonical text.
fn large(gap: &str, amount: u32) -> Vec<u8> {
    let items: Vec<String> = (0..MIN_BODY_BYTES / 16)
        .map(|i| format!("{{\"sku\":{gap}\"s-{i}\"}}"))
        .collect();
    format!(
        "{{\"amount\":{gap}{amount},{gap}\"items\":[{}]}}",
        items.join(",")
    )
    .into_bytes()
}

/// The fingerprint `keyed()` with `body` has, computed the way the lease-store's
/// `fingerprint` command does: canonicalizing the body.
fn canonical_fingerprint(body: &[u8]) -> Digest {
    let headers = keyed();
    let names = DEFAULT_FINGERPRINT_HEADERS.map(str::to_owned);
    let rules = Rules {
        key_header: "idempotency-key",
        fingerprint_headers: &names,
    };
    let target = Target::from_headers(&headers).unwrap();
    let head = RequestHead::read(target, &headers, &rules).unwrap();
    head.identify(Principal::AnonymousShared, ScopeMode::Route, body)
        .explanation
        .fingerprint
}

/// The claim's fingerprint among `out`.
fn claimed_fingerprint(out: &[Action]) -> Digest {
    match calls(out).as_slice() {
        [StoreCall::Claim { request, .. }] => request.fingerprint,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn writes(out: &[Action]) -> Vec<&Action> {
    out.iter()
        .filter(|a| matches!(a, Action::WriteBodyDigest { .. }))
        .collect()
}

const REMEMBERED: Metric = Metric::Event(EventKind::BodyDigestRemembered);

#[test]
fn a_byte_identical_large_body_takes_its_digest_from_the_memo() {
    let body = large(" ", 10);
    let key = body_memo::slot_key(&RawDigest::of(&body));
    let mut first = Harness::new(config());
    first.headers(keyed(), false);
    let out = first.body(&body);
    assert!(out.contains(&Action::ReadBodyDigest { key: key.clone() }));
    assert_eq!(
        writes(&out).len(),
        1,
        "the first sight is remembered: {out:?}"
    );
    assert!(!counts(&out).contains(&REMEMBERED));
    let fingerprint = claimed_fingerprint(&out);
    assert_eq!(fingerprint, canonical_fingerprint(&body));

    let mut retry = first.next_stream();
    retry.headers(keyed(), false);
    let out = retry.body(&body);
    assert!(out.contains(&Action::ReadBodyDigest { key }));
    assert!(writes(&out).is_empty(), "nothing new to remember: {out:?}");
    assert!(counts(&out).contains(&REMEMBERED));
    assert_eq!(claimed_fingerprint(&out), fingerprint);
}

#[test]
fn a_respelled_body_misses_the_memo_and_keeps_its_fingerprint() {
    let mut first = Harness::new(config());
    first.headers(keyed(), false);
    let fingerprint = claimed_fingerprint(&first.body(&large(" ", 10)));

    let mut respelled = first.next_stream();
    respelled.headers(keyed(), false);
    let out = respelled.body(&large("\n  ", 10));
    assert!(!counts(&out).contains(&REMEMBERED));
    assert_eq!(writes(&out).len(), 1);
    assert_eq!(claimed_fingerprint(&out), fingerprint);

    let mut changed = first.next_stream();
    changed.headers(keyed(), false);
    let out = changed.body(&large(" ", 11));
    assert_ne!(
        claimed_fingerprint(&out),
        fingerprint,
        "another body, another fingerprint"
    );
}

#[test]
fn a_slot_that_another_body_holds_is_not_believed() {
    let body = large(" ", 10);
    let raw = RawDigest::of(&body);
    let other = large(" ", 99);
    let lie = BodyDigest {
        canonical: true,
        digest: fingerprint_body(&other),
    };
    let mut s = Harness::new(config());
    s.host.shared.insert(
        body_memo::slot_key(&raw),
        body_memo::encode(&RawDigest::of(&other), lie),
    );
    s.headers(keyed(), false);
    let out = s.body(&body);
    assert!(!counts(&out).contains(&REMEMBERED));
    assert_eq!(claimed_fingerprint(&out), canonical_fingerprint(&body));
    assert_eq!(
        writes(&out),
        vec![&Action::WriteBodyDigest {
            key: body_memo::slot_key(&raw),
            value: body_memo::encode(
                &raw,
                BodyDigest {
                    canonical: true,
                    digest: fingerprint_body(&body),
                }
            ),
        }],
        "the slot now remembers this body"
    );
}

#[test]
fn small_and_non_json_bodies_never_touch_the_memo() {
    let mut small = Harness::new(config());
    small.headers(keyed(), false);
    let out = small.body(br#"{"amount": 10}"#);
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::ReadBodyDigest { .. }))
    );
    assert!(writes(&out).is_empty());

    let mut text = Harness::new(config());
    let mut headers = keyed();
    headers.retain(|(name, _)| name != "content-type");
    headers.push(h("content-type", "text/plain"));
    text.headers(headers, false);
    let out = text.body(&large(" ", 10));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::ReadBodyDigest { .. }))
    );
    assert_eq!(calls(&out).len(), 1, "it claims as before: {out:?}");
}

/// SHA-256 of the canonical text of a JSON `body`.
fn fingerprint_body(body: &[u8]) -> Digest {
    let media_type = keyflight_protocol::media_type::MediaType::parse(b"application/json");
    keyflight_protocol::fingerprint::body_digest(&media_type, body).digest
}
