//! RFC 8785 (JCS) canonical JSON for fingerprints, with the K4 exactness rule.
//!
//! `canonicalize` parses the body into a flat list of nodes (`tree.rs`),
//! gives each number its token in the body and checks it (`numbers.rs`), and
//! writes the canonical text (`write.rs`). Two things JCS leaves to its caller
//! are decided here:
//!
//! - **I-JSON input.** RFC 8785 is defined for I-JSON (RFC 7493), which forbids
//!   duplicate object keys. `serde_json::Value` would silently keep the last
//!   duplicate, so `{"amount":1,"amount":2}` and `{"amount":2}` would look
//!   equal. The body is therefore parsed into a tree of its own that keeps every
//!   member, and the writer rejects duplicates (compared after escape
//!   decoding, so `"a"` and `"\u0061"` clash): such a body is digested raw
//!   ([`RawReason::InvalidJson`]). Lone surrogates, invalid UTF-8, trailing
//!   garbage, and nesting deeper than serde_json's limit of 128 are rejected by
//!   the parser the same way.
//! - **Exact numbers.** JCS prints every number as the shortest double that
//!   round-trips, so an integer beyond 2^53 or a decimal with more digits than a
//!   double holds would change value. Each number token of the body is read as
//!   the tree reads it (serde_json's parse to a double) and printed as the
//!   writer prints it (ryu-js, ES6 `Number.prototype.toString`); if any printed
//!   number denotes another decimal value than its token, the body is digested
//!   raw ([`RawReason::LossyNumber`]). This is the canonical text's numbers
//!   compared with the body's, one by one, without building the multiset
//!   (canonicalization reorders members, never numbers within a value).
//!
//! The canonical text is checked against `serde_json_canonicalizer`, kept as
//! the tests' oracle, and against the Node and Python readings of the
//! differential tests (`protocol/tests/differential.rs`).

mod numbers;
mod tree;
mod write;

use crate::fingerprint::RawReason;

/// The RFC 8785 canonical form of `body`, or why the raw bytes must be used.
pub fn canonicalize(body: &[u8]) -> Result<String, RawReason> {
    let mut nodes = tree::parse(body).map_err(|_| RawReason::InvalidJson)?;
    if !numbers::read_tokens(&mut nodes, body) {
        return Err(RawReason::LossyNumber);
    }
    // The canonical text is never longer than a body without whitespace.
    let mut canonical = String::with_capacity(body.len());
    write::canonical(&nodes, &mut canonical).map_err(|_| RawReason::InvalidJson)?;
    Ok(canonical)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
