//! Shared K3/K4 vectors (`testdata/vectors.json`): the edge (wasm) and the host
//! must compute the same digests bit for bit.
//!
//! The expected digests come from `testdata/gen_vectors.py`, an independent
//! implementation of the framing fed with normalized forms written by hand.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use base64::Engine as _;
use keyflight_protocol::fingerprint::{BodyForm, RawReason, explain};
use keyflight_protocol::key::parse_key;
use keyflight_protocol::{FingerprintInput, Principal, ScopeInput, ScopeMode, scope};
use serde::Deserialize;

const VECTORS: &str = include_str!("../../testdata/vectors.json");

#[derive(Deserialize)]
struct Vectors {
    scope: Vec<ScopeVector>,
    fingerprint: Vec<FingerprintVector>,
}

#[derive(Deserialize)]
struct ScopeVector {
    name: String,
    principal: Option<String>,
    authority: String,
    method: String,
    path_and_query: String,
    key_header: String,
    mode: String,
    expected: String,
}

#[derive(Deserialize)]
struct FingerprintVector {
    name: String,
    request: Request,
    expected: ExpectedFingerprint,
}

#[derive(Deserialize)]
struct Request {
    method: String,
    path_and_query: String,
    content_type: Option<String>,
    body: Option<String>,
    body_b64: Option<String>,
    headers: Vec<(String, Option<String>)>,
}

#[derive(Deserialize)]
struct ExpectedFingerprint {
    normalized_path: String,
    sorted_query: Vec<(String, String)>,
    headers: Vec<(String, Option<String>)>,
    canonical: Option<String>,
    raw_reason: Option<String>,
    body_digest: String,
    fingerprint: String,
}

fn vectors() -> Vectors {
    serde_json::from_str(VECTORS).expect("testdata/vectors.json parses")
}

#[test]
fn scope_vectors() {
    let vectors = vectors().scope;
    assert!(vectors.len() >= 5);
    for v in vectors {
        let key = parse_key(&[v.key_header.as_bytes()])
            .expect("valid key")
            .expect("present");
        let input = ScopeInput {
            principal: v
                .principal
                .as_deref()
                .map_or(Principal::AnonymousShared, Principal::Named),
            authority: &v.authority,
            method: &v.method,
            path_and_query: &v.path_and_query,
            key: &key,
            mode: match v.mode.as_str() {
                "route" => ScopeMode::Route,
                "service" => ScopeMode::Service,
                other => panic!("{}: unknown mode {other}", v.name),
            },
        };
        assert_eq!(scope(&input).to_hex(), v.expected, "{}", v.name);
    }
}

#[test]
fn fingerprint_vectors() {
    let vectors = vectors().fingerprint;
    assert!(vectors.len() >= 5);
    for v in vectors {
        let r = &v.request;
        let body = match (&r.body, &r.body_b64) {
            (Some(text), None) => text.as_bytes().to_vec(),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64 body"),
            _ => panic!("{}: give exactly one of body, body_b64", v.name),
        };
        let headers: Vec<(&str, Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(n, val)| (n.as_str(), val.as_deref().map(str::as_bytes)))
            .collect();
        let e = explain(&FingerprintInput {
            method: &r.method,
            path_and_query: &r.path_and_query,
            content_type: r.content_type.as_deref(),
            body: &body,
            selected_headers: &headers,
        });

        let x = &v.expected;
        assert_eq!(e.normalized_path, x.normalized_path, "{}", v.name);
        assert_eq!(e.sorted_query, x.sorted_query, "{}", v.name);
        assert_eq!(e.headers, x.headers, "{}", v.name);
        let form = match (&x.canonical, x.raw_reason.as_deref()) {
            (Some(canonical), None) => BodyForm::CanonicalJson(canonical.clone()),
            (None, Some("not_json_content_type")) => BodyForm::Raw(RawReason::NotJsonContentType),
            (None, Some("invalid_json")) => BodyForm::Raw(RawReason::InvalidJson),
            (None, Some("lossy_number")) => BodyForm::Raw(RawReason::LossyNumber),
            _ => panic!("{}: bad body expectation", v.name),
        };
        assert_eq!(e.body_form, form, "{}", v.name);
        assert_eq!(e.body_digest.to_hex(), x.body_digest, "{}", v.name);
        assert_eq!(e.fingerprint.to_hex(), x.fingerprint, "{}", v.name);
    }
}
