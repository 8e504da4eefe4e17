//! K4: the request fingerprint.
//!
//! `fingerprint = SHA-256(framed(domain tag, method, path, query, media type,
//! body form, body digest, selected headers))`. Two requests with the same
//! fingerprint are the same operation; the same key with another fingerprint
//! is a conflict (409).
//!
//! What each field is and why:
//!
//! - **method** as sent (methods are case-sensitive, RFC 9110 §9.1).
//! - **path and query** in the target's normal form ([`crate::target`]): equal
//!   spellings of one target agree, targets an upstream could tell apart do not.
//! - **media type**: the normalized `content-type` with every parameter
//!   ([`crate::media_type`]), absent and unparseable values marked as such, so
//!   the same bytes under another type, boundary or charset never replay.
//! - **body**: the RFC 8785 canonical text when the media type is JSON, its
//!   charset absent or UTF-8, and the body is exact I-JSON ([`crate::json`]);
//!   else the raw bytes. A marker field (`jcs`/`raw`) says which, so a raw
//!   body can never pass for the canonical form of a different JSON body. An
//!   empty body is never JSON, so it always digests as empty raw bytes.
//! - **selected headers**, sorted by lowercase name, each with a presence
//!   marker (absent and empty differ) and its value without surrounding
//!   whitespace (a repeated header: its values joined with `,`).
//!
//! Lists are count-prefixed, so the framed preimage stays injective. The
//! function is total: any input, however malformed, gets a fingerprint.

use crate::Digest;
use crate::framing::FramedHasher;
use crate::json;
use crate::media_type::{MediaType, trim_ows};
use crate::target::Target;

/// The fingerprint's version, spelled once for [`VERSION`] and the domain tag.
macro_rules! version {
    () => {
        "v2"
    };
}

const DOMAIN_TAG: &str = concat!("keyflight/fingerprint/", version!());

/// The version of the fingerprint and its canonical forms (the domain tag's
/// last part): anything that keeps a body's [`BodyDigest`] (the edge's memo)
/// keeps it under this version, so a filter that canonicalizes differently
/// never reads another's.
pub const VERSION: &str = version!();

/// Headers that enter the fingerprint unless a policy says otherwise (K4):
/// a conditional write's precondition and an approval's digest change what
/// the request means, while transport headers never do.
pub const DEFAULT_FINGERPRINT_HEADERS: [&str; 2] = ["if-match", "x-approval-digest"];

/// What a fingerprint is computed from.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintInput<'a> {
    /// The normalized request target.
    pub target: &'a Target,
    /// The normalized `content-type`.
    pub media_type: &'a MediaType,
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
    /// The content type is JSON with a charset other than UTF-8.
    NotUtf8Charset,
    /// The content type says JSON but the body does not parse.
    InvalidJson,
    /// A number's canonical form would denote a different decimal value.
    LossyNumber,
}

/// How a body entered the fingerprint, by digest alone: all the fingerprint
/// needs of the body, and what the edge may remember of a body it has seen
/// (`docs/stream-machine.md#the-body-digest-memo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDigest {
    /// The body entered as RFC 8785 canonical text (`jcs`), not as raw bytes.
    pub canonical: bool,
    /// SHA-256 of the canonical text, or of the raw bytes.
    pub digest: Digest,
}

/// Every intermediate of a fingerprint, for `keyflight fingerprint` (K5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The method as hashed.
    pub method: String,
    /// The path after normalization.
    pub normalized_path: String,
    /// Query pairs after normalization, sorted.
    pub sorted_query: Vec<(String, String)>,
    /// The media type as hashed.
    pub media_type: MediaType,
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
    let target = input.target;
    let (body_form, body_digest) = body(input.media_type, input.body);
    let headers = selected_headers(input.selected_headers);
    let fingerprint = frame(input, digested(&body_form, body_digest), &headers);

    Explanation {
        method: target.method.clone(),
        normalized_path: target.path.clone(),
        sorted_query: target.query.clone(),
        media_type: input.media_type.clone(),
        body_form,
        body_digest,
        headers: headers
            .into_iter()
            .map(|(name, value)| (name, value.map(|v| String::from_utf8_lossy(v).into_owned())))
            .collect(),
        fingerprint,
    }
}

/// How `body` enters the fingerprint of a request whose media type is
/// `media_type`: the one costly step (canonicalizing and hashing), kept apart
/// so that the edge may remember it for a body it has seen.
pub fn body_digest(media_type: &MediaType, body: &[u8]) -> BodyDigest {
    let (form, digest) = self::body(media_type, body);
    digested(&form, digest)
}

/// What the fingerprint keeps of a body that entered it as `form` with `digest`.
fn digested(form: &BodyForm, digest: Digest) -> BodyDigest {
    BodyDigest {
        canonical: matches!(form, BodyForm::CanonicalJson(_)),
        digest,
    }
}

/// The fingerprint of `input` with its body already digested: equal to
/// [`fingerprint`] whenever `body` is [`body_digest`] of `input.body`, which
/// this never reads.
pub fn fingerprint_digested(input: &FingerprintInput<'_>, body: BodyDigest) -> Digest {
    frame(input, body, &selected_headers(input.selected_headers))
}

/// Frames every field but the body's bytes into the fingerprint.
fn frame(
    input: &FingerprintInput<'_>,
    body: BodyDigest,
    headers: &[(String, Option<&[u8]>)],
) -> Digest {
    let target = input.target;
    let mut h = FramedHasher::new(DOMAIN_TAG);
    h.field(target.method.as_bytes())
        .field(target.path.as_bytes());
    h.count(target.query.len());
    for (name, value) in &target.query {
        h.field(name.as_bytes()).field(value.as_bytes());
    }
    input.media_type.frame(&mut h);
    let form_marker: &[u8] = if body.canonical { b"jcs" } else { b"raw" };
    h.field(form_marker).field(&body.digest.0);
    h.count(headers.len());
    for (name, value) in headers {
        h.field(name.as_bytes());
        match value {
            Some(value) => h.field(PRESENT).field(value),
            None => h.field(ABSENT),
        };
    }
    h.finish()
}

const PRESENT: &[u8] = &[1];
const ABSENT: &[u8] = &[0];

/// How the body enters the fingerprint, and its digest.
fn body(media_type: &MediaType, body: &[u8]) -> (BodyForm, Digest) {
    if !media_type.is_json() {
        return (
            BodyForm::Raw(RawReason::NotJsonContentType),
            Digest::of(body),
        );
    }
    if !media_type.is_utf8_json() {
        return (BodyForm::Raw(RawReason::NotUtf8Charset), Digest::of(body));
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
