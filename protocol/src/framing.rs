//! Length-delimited framing for digest preimages (K3, K4).
//!
//! Every field is written as its byte length (u64, big-endian) followed by the
//! bytes, so the encoding of a tuple is injective: `("ab", "c")` and
//! `("a", "bc")` can never share a preimage, whatever the fields contain.

use sha2::{Digest as _, Sha256};

use crate::Digest;

/// Streams length-prefixed fields into SHA-256.
pub struct FramedHasher(Sha256);

impl FramedHasher {
    /// Starts a preimage with its domain tag, so a scope can never equal a
    /// fingerprint (or any future digest) of the same fields.
    pub fn new(domain_tag: &str) -> Self {
        let mut h = FramedHasher(Sha256::new());
        h.field(domain_tag.as_bytes());
        h
    }

    /// Appends one field.
    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
        self
    }

    /// The digest of everything appended so far.
    pub fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}
