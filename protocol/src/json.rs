//! RFC 8785 (JCS) canonical JSON for fingerprints, with the K4 exactness rule.
//!
//! Canonicalization itself is `serde_json_canonicalizer`'s; this module adds the
//! one thing JCS cannot promise: that the canonical text of every number denotes
//! the same decimal value as the text that was sent (an integer beyond 2^53 would
//! otherwise round, and two different amounts would look equal).

use crate::fingerprint::RawReason;

/// True for `application/json` and `application/*+json`, any parameters.
pub fn is_json_content_type(content_type: &str) -> bool {
    let _ = content_type;
    todo!("protocol helper implements")
}

/// The RFC 8785 canonical form of `body`, or why the raw bytes must be used.
pub fn canonicalize(body: &[u8]) -> Result<String, RawReason> {
    let _ = body;
    todo!("protocol helper implements")
}
