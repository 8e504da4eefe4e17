//! Length-delimited framing for digest preimages (K3, K4).
//!
//! Every field is written as its byte length (u64, big-endian) followed by the
//! bytes, so the encoding of a tuple is injective: `("ab", "c")` and
//! `("a", "bc")` can never share a preimage, whatever the fields contain.
//! A list whose length varies (query pairs, headers) is preceded by its
//! [`count`](FramedHasher::count), so `[a, b] + [c]` and `[a] + [b, c]` stay
//! apart too.

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
        frame(bytes, |chunk| self.0.update(chunk));
        self
    }

    /// Appends the number of items of a variable-length list that follows, as
    /// one field holding the count (u64, big-endian).
    pub fn count(&mut self, items: usize) -> &mut Self {
        self.field(&(items as u64).to_be_bytes())
    }

    /// The digest of everything appended so far.
    pub fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}

/// The encoding of one field, handed to `sink` in pieces.
fn frame(bytes: &[u8], mut sink: impl FnMut(&[u8])) {
    sink(&(bytes.len() as u64).to_be_bytes());
    sink(bytes);
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The preimage [`FramedHasher`] would hash for `fields`.
    fn preimage(fields: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for field in fields {
            frame(field, |chunk| out.extend_from_slice(chunk));
        }
        out
    }

    fn fields() -> impl Strategy<Value = Vec<Vec<u8>>> {
        // Small alphabets make near-collisions ("ab","c" vs "a","bc") likely.
        prop::collection::vec(prop::collection::vec(0u8..4, 0..6), 0..6)
    }

    proptest! {
        #[test]
        fn distinct_field_lists_never_share_a_preimage(a in fields(), b in fields()) {
            prop_assume!(a != b);
            prop_assert_ne!(preimage(&a), preimage(&b));
        }

        #[test]
        fn the_hasher_hashes_exactly_the_preimage(a in fields()) {
            let mut h = FramedHasher(Sha256::new());
            for field in &a {
                h.field(field);
            }
            prop_assert_eq!(h.finish(), Digest::of(&preimage(&a)));
        }
    }

    #[test]
    fn shifting_bytes_between_fields_changes_the_preimage() {
        let ab_c = preimage(&[b"ab".to_vec(), b"c".to_vec()]);
        let a_bc = preimage(&[b"a".to_vec(), b"bc".to_vec()]);
        assert_ne!(ab_c, a_bc);
        assert_eq!(&ab_c[..8], &2u64.to_be_bytes());
    }
}
