//! Shared K3/K4 vectors (`testdata/vectors.json`): the edge (wasm) and the host
//! must compute the same digests bit for bit.
//!
//! Each vector is a request as the filter receives it — header list with
//! pseudo-headers, body, principal — fed through [`keyflight_protocol::request`],
//! the path both the filter and `keyflight fingerprint` take. The expected
//! digests come from `testdata/gen_vectors.py`, an independent implementation
//! of the framing fed with normalized forms written by hand.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
use wasm_bindgen_test::wasm_bindgen_test as test;

use base64::Engine as _;
use keyflight_protocol::fingerprint::{BodyForm, RawReason};
use keyflight_protocol::media_type::MediaType;
use keyflight_protocol::principal::name_from_headers;
use keyflight_protocol::{
    Party, Principal, PrincipalSource, RequestHead, Rules, ScopeMode, Target,
};
use serde::Deserialize;

const VECTORS: &str = include_str!("../../testdata/vectors.json");

#[derive(Deserialize)]
struct Vectors {
    requests: Vec<Vector>,
}

#[derive(Deserialize)]
struct Vector {
    name: String,
    request: Request,
    principal: Option<NamedPrincipal>,
    mode: String,
    fingerprint_headers: Vec<String>,
    expected: Expected,
}

#[derive(Deserialize)]
struct Request {
    headers: Vec<(String, String)>,
    body: Option<String>,
    body_b64: Option<String>,
}

#[derive(Deserialize)]
struct NamedPrincipal {
    source: String,
    name: String,
    /// A delegated principal's actor (the subject is `source` and `name`).
    actor: Option<NamedActor>,
}

#[derive(Deserialize)]
struct NamedActor {
    source: String,
    name: String,
}

#[derive(Deserialize)]
struct Expected {
    authority: String,
    normalized_path: String,
    sorted_query: Vec<(String, String)>,
    media_type: Option<ExpectedMediaType>,
    headers: Vec<(String, Option<String>)>,
    canonical: Option<String>,
    raw_reason: Option<String>,
    body_digest: String,
    fingerprint: String,
    scope: Option<String>,
}

#[derive(Deserialize)]
struct ExpectedMediaType {
    #[serde(rename = "type")]
    essence: Option<String>,
    parameters: Option<Vec<(String, String)>>,
    unparsed: Option<String>,
}

impl ExpectedMediaType {
    fn to_media_type(&self) -> MediaType {
        match (&self.essence, &self.parameters, &self.unparsed) {
            (Some(essence), Some(parameters), None) => {
                let (kind, subtype) = essence.split_once('/').expect("type/subtype");
                MediaType::Parsed {
                    kind: kind.to_owned(),
                    subtype: subtype.to_owned(),
                    parameters: parameters
                        .iter()
                        .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
                        .collect(),
                }
            }
            (None, None, Some(raw)) => MediaType::Unparsed(raw.as_bytes().to_vec()),
            _ => panic!("a media type is parsed or unparsed"),
        }
    }
}

#[test]
fn request_vectors() {
    let vectors: Vectors = serde_json::from_str(VECTORS).expect("testdata/vectors.json parses");
    assert!(vectors.requests.len() >= 10);
    for v in vectors.requests {
        let headers: Vec<(String, Vec<u8>)> = v
            .request
            .headers
            .iter()
            .map(|(n, val)| (n.clone(), val.as_bytes().to_vec()))
            .collect();
        let body = match (&v.request.body, &v.request.body_b64) {
            (Some(text), None) => text.as_bytes().to_vec(),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64 body"),
            _ => panic!("{}: give exactly one of body, body_b64", v.name),
        };
        let target = Target::from_headers(&headers).expect("pseudo-headers");
        let rules = Rules {
            key_header: "idempotency-key",
            fingerprint_headers: &v.fingerprint_headers,
        };
        let head = RequestHead::read(target, &headers, &rules).expect("a valid key");
        let source = v
            .principal
            .as_ref()
            .map(|p| PrincipalSource::from_description(&p.source).expect("a principal source"));
        let actor = v
            .principal
            .as_ref()
            .and_then(|p| p.actor.as_ref())
            .map(|a| {
                let source = PrincipalSource::from_description(&a.source).expect("an actor source");
                (source, a.name.as_str())
            });
        let principal = match (&v.principal, &source, &actor) {
            (Some(p), Some(source), actor) => {
                if let PrincipalSource::Header(name) = source {
                    let read = name_from_headers(source, name, &headers).expect("one value");
                    assert_eq!(read.as_deref(), Some(p.name.as_str()), "{}", v.name);
                }
                match actor {
                    Some((actor_source, actor)) => Principal::Delegated {
                        subject: Party {
                            source,
                            name: &p.name,
                        },
                        actor: Party {
                            source: actor_source,
                            name: actor,
                        },
                    },
                    None => Principal::Named {
                        source,
                        name: &p.name,
                    },
                }
            }
            _ => Principal::AnonymousShared,
        };
        let mode = match v.mode.as_str() {
            "route" => ScopeMode::Route,
            "service" => ScopeMode::Service,
            other => panic!("{}: unknown mode {other}", v.name),
        };
        let id = head.identify(principal, mode, &body);

        let x = &v.expected;
        let e = &id.explanation;
        assert_eq!(
            head.target.authority.normalized(),
            x.authority,
            "{}",
            v.name
        );
        assert_eq!(e.normalized_path, x.normalized_path, "{}", v.name);
        assert_eq!(e.sorted_query, x.sorted_query, "{}", v.name);
        let media_type = x
            .media_type
            .as_ref()
            .map_or(MediaType::Absent, ExpectedMediaType::to_media_type);
        assert_eq!(e.media_type, media_type, "{}", v.name);
        assert_eq!(e.headers, x.headers, "{}", v.name);
        let form = match (&x.canonical, x.raw_reason.as_deref()) {
            (Some(canonical), None) => BodyForm::CanonicalJson(canonical.clone()),
            (None, Some("not_json_content_type")) => BodyForm::Raw(RawReason::NotJsonContentType),
            (None, Some("not_utf8_charset")) => BodyForm::Raw(RawReason::NotUtf8Charset),
            (None, Some("invalid_json")) => BodyForm::Raw(RawReason::InvalidJson),
            (None, Some("lossy_number")) => BodyForm::Raw(RawReason::LossyNumber),
            _ => panic!("{}: bad body expectation", v.name),
        };
        assert_eq!(e.body_form, form, "{}", v.name);
        assert_eq!(e.body_digest.to_hex(), x.body_digest, "{}", v.name);
        assert_eq!(e.fingerprint.to_hex(), x.fingerprint, "{}", v.name);
        assert_eq!(id.scope.map(|s| s.to_hex()), x.scope, "{}", v.name);
    }
}

#[test]
fn respelled_vectors_share_their_digests() {
    // The generator's second vector respells the first: one operation.
    let vectors: serde_json::Value = serde_json::from_str(VECTORS).expect("parses");
    let [first, second] = [0, 1].map(|i| &vectors["requests"][i]["expected"]);
    assert_eq!(first["scope"], second["scope"]);
    assert_eq!(first["fingerprint"], second["fingerprint"]);
    assert_ne!(vectors["requests"][2]["expected"]["scope"], first["scope"]);
}
