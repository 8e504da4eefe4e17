//! K4: the request fingerprint.
//!
//! `fingerprint = SHA-256(framed(domain tag, method, normalized path, sorted
//! query, body form, body digest, selected headers))`. Two requests with the
//! same fingerprint are the same operation; the same key with another
//! fingerprint is a conflict (409).
//!
//! What each field is and why:
//!
//! - **method** as sent (methods are case-sensitive, RFC 9110 §9.1).
//! - **path and query** normalized per RFC 3986 (see the `uri` module): equal
//!   spellings of one target agree, targets a server could tell apart do not.
//! - **body**: the RFC 8785 canonical text when the content type is JSON and the
//!   body is exact I-JSON ([`crate::json`]), else the raw bytes; a marker field
//!   (`jcs`/`raw`) says which, so a raw body can never pass for the canonical
//!   form of a different JSON body. An empty body is never JSON, so it always
//!   digests as empty raw bytes, whatever the content type.
//! - **selected headers**, sorted by lowercase name, each with a presence marker
//!   (absent and empty differ) and its value without surrounding whitespace.
//!
//! Lists are count-prefixed, so the framed preimage stays injective. The
//! function is total: any input, however malformed, gets a fingerprint.

use crate::Digest;
use crate::framing::FramedHasher;
use crate::json;
use crate::uri;

const DOMAIN_TAG: &str = "keyflight/fingerprint/v1";

/// Headers that enter the fingerprint unless a policy says otherwise (K4):
/// a conditional write's precondition and an approval's digest change what
/// the request means, while transport headers never do.
pub const DEFAULT_FINGERPRINT_HEADERS: [&str; 2] = ["if-match", "x-approval-digest"];

/// What a fingerprint is computed from.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintInput<'a> {
    /// The request method.
    pub method: &'a str,
    /// Path and query as received (`/a/b?x=1&y=2`).
    pub path_and_query: &'a str,
    /// The `content-type` header, if any.
    pub content_type: Option<&'a str>,
    /// The full request body (empty when there is none).
    pub body: &'a [u8],
    /// Each configured header (lowercase name) with its value, `None` when absent.
    pub selected_headers: &'a [(&'a str, Option<&'a [u8]>)],
}

/// How the body entered the fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyForm {
    /// RFC 8785 canonical JSON text.
    CanonicalJson(String),
    /// Raw bytes, with the reason JCS was not used.
    Raw(RawReason),
}

/// Why a body was digested as raw bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawReason {
    /// The content type is not JSON.
    NotJsonContentType,
    /// The content type says JSON but the body does not parse.
    InvalidJson,
    /// A number's canonical form would denote a different decimal value.
    LossyNumber,
}

/// Every intermediate of a fingerprint, for `lease-store fingerprint` (K5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The method as hashed.
    pub method: String,
    /// The path after normalization.
    pub normalized_path: String,
    /// Query pairs after normalization, sorted.
    pub sorted_query: Vec<(String, String)>,
    /// How the body was treated.
    pub body_form: BodyForm,
    /// SHA-256 of the canonical body (or of the raw bytes).
    pub body_digest: Digest,
    /// The selected headers as hashed.
    pub headers: Vec<(String, Option<String>)>,
    /// The fingerprint.
    pub fingerprint: Digest,
}

/// Computes the fingerprint of a request.
pub fn fingerprint(input: &FingerprintInput<'_>) -> Digest {
    explain(input).fingerprint
}

/// Computes the fingerprint and keeps every intermediate step.
///
/// Header values that are not UTF-8 are hashed as sent; only their
/// [`Explanation`] text replaces invalid sequences with U+FFFD.
pub fn explain(input: &FingerprintInput<'_>) -> Explanation {
    let (normalized_path, sorted_query) = uri::normalize(input.path_and_query);
    let (body_form, body_digest) = body(input.content_type, input.body);
    let headers = selected_headers(input.selected_headers);

    let mut h = FramedHasher::new(DOMAIN_TAG);
    h.field(input.method.as_bytes())
        .field(normalized_path.as_bytes());
    h.count(sorted_query.len());
    for (name, value) in &sorted_query {
        h.field(name.as_bytes()).field(value.as_bytes());
    }
    let form_marker: &[u8] = match body_form {
        BodyForm::CanonicalJson(_) => b"jcs",
        BodyForm::Raw(_) => b"raw",
    };
    h.field(form_marker).field(&body_digest.0);
    h.count(headers.len());
    for (name, value) in &headers {
        h.field(name.as_bytes());
        match value {
            Some(value) => h.field(PRESENT).field(value),
            None => h.field(ABSENT),
        };
    }

    Explanation {
        method: input.method.to_owned(),
        normalized_path,
        sorted_query,
        body_form,
        body_digest,
        headers: headers
            .into_iter()
            .map(|(name, value)| (name, value.map(|v| String::from_utf8_lossy(v).into_owned())))
            .collect(),
        fingerprint: h.finish(),
    }
}

const PRESENT: &[u8] = &[1];
const ABSENT: &[u8] = &[0];

/// How the body enters the fingerprint, and its digest.
fn body(content_type: Option<&str>, body: &[u8]) -> (BodyForm, Digest) {
    if !content_type.is_some_and(json::is_json_content_type) {
        return (
            BodyForm::Raw(RawReason::NotJsonContentType),
            Digest::of(body),
        );
    }
    match json::canonicalize(body) {
        Ok(canonical) => {
            let digest = Digest::of(canonical.as_bytes());
            (BodyForm::CanonicalJson(canonical), digest)
        }
        Err(reason) => (BodyForm::Raw(reason), Digest::of(body)),
    }
}

/// Lowercase names, values without optional whitespace (RFC 9110 §5.5),
/// sorted (by name, then value) so the configured order does not matter.
fn selected_headers<'a>(headers: &[(&str, Option<&'a [u8]>)]) -> Vec<(String, Option<&'a [u8]>)> {
    let mut out: Vec<(String, Option<&'a [u8]>)> = headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.map(trim_ows)))
        .collect();
    out.sort();
    out
}

fn trim_ows(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |at| at + 1);
    &value[start..end]
}
