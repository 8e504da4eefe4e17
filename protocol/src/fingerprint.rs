//! K4: the request fingerprint.
//!
//! `fingerprint = SHA-256(framed(domain tag, method, normalized path, sorted
//! query, body digest, selected headers))`. Two requests with the same
//! fingerprint are the same operation; the same key with another fingerprint
//! is a conflict (409).

use crate::Digest;

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
pub fn explain(input: &FingerprintInput<'_>) -> Explanation {
    let _ = input;
    todo!("protocol helper implements K4")
}
