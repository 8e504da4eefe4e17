//! The body-digest memo: what the edge remembers of a large JSON body it has
//! fingerprinted, so that a byte-identical retry is not canonicalized again
//! (`docs/stream-machine.md#the-body-digest-memo`).
//!
//! Canonicalizing and hashing a body ([`fingerprint::body_digest`]) is the
//! costly step of a fingerprint, and it is a pure function of the body's
//! bytes once the media type says UTF-8 JSON. So the memo maps a digest of the
//! raw bytes ([`RawDigest`]) to that result. A retry sent byte for byte again
//! (what clients and meshes send) pays one hash of its bytes instead of a
//! parse, a canonical rewrite and a SHA-256; a respelled body misses and is
//! canonicalized as before, so the 409 rule is the same.
//!
//! It lives in shared data, like the edge cache ([`crate::edge_cache`]): every
//! worker of the VM sees it, and it has no eviction, so it is a fixed array
//! of [`SLOTS`] slots under `keyflight.body_digest.<fingerprint version>.<slot>`,
//! the newest entry overwriting a slot's older one. Memory is bounded by
//! `SLOTS` entries of 69 bytes and their keys, whatever the traffic. The fingerprint's
//! version is in the key, so a filter that canonicalizes differently (a
//! rollout across versions in one VM) never reads this one's entries.
//!
//! Slot value layout:
//!
//! ```text
//! magic "KFM1" | raw digest [32] | form u8 (1 = canonical, 0 = raw) | body digest [32]
//! ```
//!
//! A slot carries its raw digest and the lookup compares it: a slot another
//! body took is a miss. Decoding is total: short or foreign bytes are a miss.

use keyflight_protocol::Digest;
use keyflight_protocol::fingerprint::{self, BodyDigest};
use keyflight_protocol::media_type::MediaType;

/// BLAKE3 of a body's raw bytes: the memo's key. Any collision-resistant
/// hash would do (a collision would give a body another's fingerprint); this
/// one costs under half of SHA-256 in wasm, and the memo is only worth its
/// hash while that hash is cheap next to canonicalizing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawDigest(pub [u8; 32]);

impl RawDigest {
    /// The digest of `body`'s bytes.
    pub fn of(body: &[u8]) -> Self {
        RawDigest(*blake3::hash(body).as_bytes())
    }
}

/// Slots in the memo: at most this many entries of 69 bytes (and their keys)
/// in shared data per VM.
pub const SLOTS: u32 = 4096;

/// Bodies below this are canonicalized every time: for them the parse costs
/// about what the memo's hash and shared-data read would.
pub const MIN_BODY_BYTES: usize = 16 * 1024;

/// Prefix of every slot key in shared data (the fingerprint's version follows).
pub const KEY_PREFIX: &str = "keyflight.body_digest.";

/// Identifies the encoding; a slot written by another version is a miss.
const MAGIC: &[u8; 4] = b"KFM1";

const ENCODED_LEN: usize = 4 + 32 + 1 + 32;

/// Whether a body of `len` bytes under `media_type` goes through the memo:
/// only a body the fingerprint would canonicalize, and only a large one.
pub fn applies(media_type: &MediaType, len: usize) -> bool {
    len >= MIN_BODY_BYTES && media_type.is_utf8_json()
}

/// The shared-data key of the slot for a body whose raw digest is `raw`.
pub fn slot_key(raw: &RawDigest) -> String {
    let mut first = [0u8; 8];
    first.copy_from_slice(&raw.0[..8]);
    let index = u64::from_be_bytes(first) % u64::from(SLOTS);
    format!("{KEY_PREFIX}{}.{index}", fingerprint::VERSION)
}

/// The slot value remembering that the body whose raw digest is `raw`
/// digests to `body`.
pub fn encode(raw: &RawDigest, body: BodyDigest) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENCODED_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&raw.0);
    out.push(u8::from(body.canonical));
    out.extend_from_slice(&body.digest.0);
    out
}

/// What the slot `bytes` (if any) remembers of the body whose raw digest is
/// `raw`: `None` unless it is exactly an entry for that body.
pub fn lookup(bytes: Option<&[u8]>, raw: &RawDigest) -> Option<BodyDigest> {
    let bytes = bytes?;
    if bytes.len() != ENCODED_LEN {
        return None;
    }
    let (magic, rest) = bytes.split_at(4);
    let (slot_raw, rest) = rest.split_at(32);
    let (form, digest) = rest.split_at(1);
    if magic != MAGIC || slot_raw != raw.0 {
        return None;
    }
    let canonical = match form {
        [1] => true,
        [0] => false,
        _ => return None,
    };
    Some(BodyDigest {
        canonical,
        digest: Digest(digest.try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> MediaType {
        MediaType::parse(b"application/json")
    }

    #[test]
    fn an_entry_reads_back_for_its_own_body_only() {
        let raw = RawDigest::of(b"{ \"a\": 1 }");
        let body = fingerprint::body_digest(&json(), b"{ \"a\": 1 }");
        let bytes = encode(&raw, body);
        assert_eq!(lookup(Some(&bytes), &raw), Some(body));
        assert_eq!(lookup(Some(&bytes), &RawDigest::of(b"{\"a\":1}")), None);
        let raw_form = BodyDigest {
            canonical: false,
            digest: Digest::of(b"{ \"a\": 1 }"),
        };
        assert_eq!(lookup(Some(&encode(&raw, raw_form)), &raw), Some(raw_form));
    }

    #[test]
    fn foreign_short_and_empty_slots_are_misses() {
        let raw = RawDigest::of(b"x");
        let good = encode(
            &raw,
            BodyDigest {
                canonical: true,
                digest: Digest::of(b"x"),
            },
        );
        assert_eq!(lookup(None, &raw), None);
        assert_eq!(lookup(Some(&good[..good.len() - 1]), &raw), None);
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(lookup(Some(&longer), &raw), None);
        let mut other_magic = good.clone();
        other_magic[3] = b'2';
        assert_eq!(lookup(Some(&other_magic), &raw), None);
        let mut bad_form = good;
        bad_form[36] = 2;
        assert_eq!(lookup(Some(&bad_form), &raw), None);
    }

    #[test]
    fn only_large_utf8_json_bodies_go_through_the_memo() {
        assert!(applies(&json(), MIN_BODY_BYTES));
        assert!(!applies(&json(), MIN_BODY_BYTES - 1));
        let utf16 = MediaType::parse(b"application/json; charset=utf-16");
        assert!(!applies(&utf16, MIN_BODY_BYTES));
        assert!(!applies(&MediaType::parse(b"text/plain"), MIN_BODY_BYTES));
    }

    #[test]
    fn slot_keys_name_the_fingerprint_version_and_stay_in_range() {
        let key = slot_key(&RawDigest([0xff; 32]));
        let prefix = format!("{KEY_PREFIX}{}.", fingerprint::VERSION);
        let index: u32 = key
            .strip_prefix(&prefix)
            .and_then(|i| i.parse().ok())
            .expect("a numbered slot");
        assert!(index < SLOTS);
    }
}
