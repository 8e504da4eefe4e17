//! F9: the edge replay cache, as data: slot keys, the slot encoding, and the
//! lookup decision.
//!
//! Completed, replayable records are kept in proxy-wasm *shared data*, so a hot
//! replay needs no lease-store call. Shared data is per `vm_id`, process-wide
//! (every worker sees it), updated with compare-and-swap, and has no TTL, no
//! eviction and no real delete (`docs/envoy-facts.md#shared-data`). So the cache is a fixed array of
//! slots: a record lives in slot `scope % slots` under the key
//! `keyflight.edge_cache.v1.<slot>`, a newer record overwrites whatever the slot
//! held, and an expired one is simply ignored. Memory is bounded by
//! `slots × max_entry_bytes` (the configuration derives `slots` from
//! `max_bytes / max_entry_bytes`), whatever the traffic.
//!
//! Two records may share a slot, so a slot carries its full 32-byte scope and
//! the lookup compares it: a colliding slot is a miss, never someone else's
//! answer. The scope includes the principal (K3), so a hit cannot cross
//! principals. The fingerprint is checked on every hit: a completed record with
//! another fingerprint is a certain conflict.
//!
//! An operator may erase or resolve a record the cache holds. The lease-store
//! counts those changes in its *operator epoch*; every worker asks for it
//! periodically ([`crate::epoch`]), and an entry carries the epoch its stream
//! knew when it read the cache — never later than the record it holds was
//! read from the store. An entry is served only under that same epoch, so
//! once a worker hears of an erase, every entry written before it is a miss.
//!
//! Slot value layout (integers little-endian):
//!
//! ```text
//! magic "KFE2" | scope [32] | fingerprint [32] | epoch u64 | stored_at_ms u64
//! | expires_at_ms u64 | status u16 | header count u16
//! | (name len u16, name, value len u16, value)* | body len u32 | body
//! ```
//!
//! Decoding is total: short, corrupted or foreign bytes are a miss, never a panic.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::StoredResponse;

/// Prefix of every slot key in shared data.
const KEY_PREFIX: &str = "keyflight.edge_cache.v1.";

/// Identifies the encoding; a slot written by another version is a miss.
const MAGIC: &[u8; 4] = b"KFE2";

/// Bytes before the first header: magic, scope, fingerprint, epoch, two
/// times, status and header count.
const FIXED_LEN: usize = 4 + 32 + 32 + 8 + 8 + 8 + 2 + 2;

/// A record to cache: written by the adapter with [`Entry::encode_at`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The record's scope (K3).
    pub scope: Digest,
    /// The fingerprint of the request that produced it (K4).
    pub fingerprint: Digest,
    /// The operator epoch the writing stream knew (F9).
    pub epoch: u64,
    /// When it stops being served (ms since the Unix epoch, the host's
    /// clock): never later than its record may be deleted
    /// (`docs/stream-machine.md#the-edge-cache`).
    pub expires_at_ms: u64,
    /// The recorded response.
    pub response: StoredResponse,
}

impl Entry {
    /// The size of the encoded slot value, in bytes.
    pub fn encoded_len(&self) -> usize {
        Entry::encoded_len_of(&self.response)
    }

    /// The size of the slot value an entry holding `response` encodes to:
    /// known before the entry (and its copy of the response) is built.
    pub fn encoded_len_of(response: &StoredResponse) -> usize {
        let headers: usize = response
            .headers
            .iter()
            .map(|(n, v)| 2 + n.len() + 2 + v.len())
            .sum();
        FIXED_LEN + headers + 4 + response.body.len()
    }

    /// Encodes the entry as stored at `now_ms`; `None` if a field does not
    /// fit its length prefix (never the case within the configured caps).
    pub fn encode_at(&self, now_ms: u64) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.scope.0);
        out.extend_from_slice(&self.fingerprint.0);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&now_ms.to_le_bytes());
        out.extend_from_slice(&self.expires_at_ms.to_le_bytes());
        out.extend_from_slice(&self.response.status.to_le_bytes());
        let count = u16::try_from(self.response.headers.len()).ok()?;
        out.extend_from_slice(&count.to_le_bytes());
        for (name, value) in &self.response.headers {
            for part in [name.as_bytes(), value.as_bytes()] {
                out.extend_from_slice(&u16::try_from(part.len()).ok()?.to_le_bytes());
                out.extend_from_slice(part);
            }
        }
        let body_len = u32::try_from(self.response.body.len()).ok()?;
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(&self.response.body);
        Some(out)
    }
}

/// A slot's content, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The record's scope.
    pub scope: Digest,
    /// The record's fingerprint.
    pub fingerprint: Digest,
    /// The operator epoch it was written under.
    pub epoch: u64,
    /// When it was cached (ms since the Unix epoch).
    pub stored_at_ms: u64,
    /// When it stops being served.
    pub expires_at_ms: u64,
    /// The response.
    pub response: StoredResponse,
}

/// Decodes a slot value; `None` for anything that is not exactly one entry.
pub fn decode(bytes: &[u8]) -> Option<Slot> {
    let mut r = Reader(bytes);
    if r.take(4)? != MAGIC {
        return None;
    }
    let scope = Digest(r.array()?);
    let fingerprint = Digest(r.array()?);
    let epoch = u64::from_le_bytes(r.array()?);
    let stored_at_ms = u64::from_le_bytes(r.array()?);
    let expires_at_ms = u64::from_le_bytes(r.array()?);
    let status = u16::from_le_bytes(r.array()?);
    let count = u16::from_le_bytes(r.array()?);
    let mut headers = Vec::with_capacity(usize::from(count).min(64));
    for _ in 0..count {
        let name = r.text()?;
        let value = r.text()?;
        headers.push((name, value));
    }
    let body_len = usize::try_from(u32::from_le_bytes(r.array()?)).ok()?;
    let body = r.take(body_len)?.to_vec();
    if !r.0.is_empty() {
        return None;
    }
    Some(Slot {
        scope,
        fingerprint,
        epoch,
        stored_at_ms,
        expires_at_ms,
        response: StoredResponse {
            status,
            headers,
            body,
        },
    })
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing usable: empty, foreign, expired, written under another
    /// operator epoch, or another scope's record.
    Miss,
    /// The same request completed: replay this.
    Hit(StoredResponse),
    /// The scope completed with another fingerprint: a certain conflict.
    Conflict,
}

/// Decides what the slot `bytes` (if any) means for a request with `scope`
/// and `fingerprint` at `now_ms`, under operator `epoch`.
pub fn lookup(
    bytes: Option<&[u8]>,
    scope: &Digest,
    fingerprint: &Digest,
    now_ms: u64,
    epoch: u64,
) -> Lookup {
    let Some(slot) = bytes.and_then(decode) else {
        return Lookup::Miss;
    };
    if slot.scope != *scope
        || slot.epoch != epoch
        || now_ms >= slot.expires_at_ms
        || now_ms < slot.stored_at_ms
    {
        return Lookup::Miss;
    }
    if slot.fingerprint == *fingerprint {
        Lookup::Hit(slot.response)
    } else {
        Lookup::Conflict
    }
}

/// The shared-data key of the slot that holds `scope`'s record, for a cache
/// of `slots` slots (at least one).
pub fn slot_key(scope: &Digest, slots: u32) -> String {
    let mut first = [0u8; 8];
    first.copy_from_slice(&scope.0[..8]);
    let index = u64::from_be_bytes(first) % u64::from(slots.max(1));
    format!("{KEY_PREFIX}{index}")
}

/// A cursor over untrusted bytes; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn text(&mut self) -> Option<String> {
        let len = usize::from(u16::from_le_bytes(self.array()?));
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn entry(scope: u8, fingerprint: u8) -> Entry {
        Entry {
            scope: Digest([scope; 32]),
            fingerprint: Digest([fingerprint; 32]),
            epoch: 7,
            expires_at_ms: 61_000,
            response: StoredResponse {
                status: 201,
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    ("etag".into(), "\"v1\"".into()),
                ],
                body: br#"{"payment_id":"p-1"}"#.to_vec(),
            },
        }
    }

    #[test]
    fn round_trip() {
        let e = entry(1, 2);
        let bytes = e.encode_at(1_000).unwrap();
        assert_eq!(bytes.len(), e.encoded_len());
        let slot = decode(&bytes).unwrap();
        assert_eq!(slot.scope, e.scope);
        assert_eq!(slot.fingerprint, e.fingerprint);
        assert_eq!(slot.epoch, 7);
        assert_eq!(slot.stored_at_ms, 1_000);
        assert_eq!(slot.expires_at_ms, 61_000);
        assert_eq!(slot.response, e.response);
    }

    #[test]
    fn same_request_hits_until_it_expires() {
        let e = entry(1, 2);
        let bytes = e.encode_at(1_000).unwrap();
        let hit = lookup(Some(&bytes), &e.scope, &e.fingerprint, 60_999, 7);
        assert_eq!(hit, Lookup::Hit(e.response.clone()));
        assert_eq!(
            lookup(Some(&bytes), &e.scope, &e.fingerprint, 61_000, 7),
            Lookup::Miss
        );
        // A clock that went backwards past the write does not serve it either.
        assert_eq!(
            lookup(Some(&bytes), &e.scope, &e.fingerprint, 999, 7),
            Lookup::Miss
        );
        assert_eq!(
            lookup(None, &e.scope, &e.fingerprint, 2_000, 7),
            Lookup::Miss
        );
    }

    #[test]
    fn an_entry_from_another_operator_epoch_is_a_miss() {
        let e = entry(1, 2);
        let bytes = e.encode_at(0).unwrap();
        assert_eq!(
            lookup(Some(&bytes), &e.scope, &e.fingerprint, 10, 7),
            Lookup::Hit(e.response.clone())
        );
        for later in [8, 6, 0] {
            assert_eq!(
                lookup(Some(&bytes), &e.scope, &e.fingerprint, 10, later),
                Lookup::Miss,
                "epoch {later}"
            );
        }
    }

    #[test]
    fn another_fingerprint_is_a_conflict() {
        let e = entry(1, 2);
        let bytes = e.encode_at(0).unwrap();
        assert_eq!(
            lookup(Some(&bytes), &e.scope, &Digest([3; 32]), 10, 7),
            Lookup::Conflict
        );
    }

    #[test]
    fn a_colliding_scope_is_a_miss_even_in_the_same_slot() {
        let e = entry(1, 2);
        let mut other = Digest([1; 32]);
        other.0[31] = 9; // same first 8 bytes: same slot, other scope
        assert_eq!(slot_key(&e.scope, 128), slot_key(&other, 128));
        let bytes = e.encode_at(0).unwrap();
        assert_eq!(
            lookup(Some(&bytes), &other, &e.fingerprint, 10, 7),
            Lookup::Miss
        );
        assert_eq!(
            lookup(Some(&bytes), &other, &Digest([3; 32]), 10, 7),
            Lookup::Miss
        );
    }

    #[test]
    fn slot_keys_are_bounded_by_the_slot_count() {
        let keys: std::collections::BTreeSet<String> = (0..=255u8)
            .map(|b| {
                let mut d = Digest([0; 32]);
                d.0[7] = b;
                slot_key(&d, 16)
            })
            .collect();
        assert_eq!(keys.len(), 16);
        assert!(keys.iter().all(|k| k.starts_with(KEY_PREFIX)));
        assert_eq!(slot_key(&Digest([5; 32]), 0), format!("{KEY_PREFIX}0"));
    }

    #[test]
    fn short_foreign_or_trailing_bytes_are_a_miss() {
        let e = entry(1, 2);
        let bytes = e.encode_at(0).unwrap();
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode(&trailing), None);
        let mut foreign = bytes.clone();
        foreign[0] = b'X';
        assert_eq!(decode(&foreign), None);
        let mut bad_utf8 = bytes;
        bad_utf8[FIXED_LEN + 2] = 0xff;
        assert_eq!(decode(&bad_utf8), None);
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
            let mut prefixed = MAGIC.to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = lookup(Some(&prefixed), &Digest([0; 32]), &Digest([0; 32]), 5, 0);
        }

        #[test]
        fn round_trips_any_response(
            status in 100u16..600,
            headers in proptest::collection::vec(("[a-z-]{1,20}", "[ -~]{0,40}"), 0..6),
            body in proptest::collection::vec(any::<u8>(), 0..300),
            now in 0u64..u64::MAX / 2,
        ) {
            let e = Entry {
                scope: Digest([7; 32]),
                fingerprint: Digest([8; 32]),
                epoch: now,
                expires_at_ms: now + 1,
                response: StoredResponse { status, headers, body },
            };
            let bytes = e.encode_at(now).unwrap();
            prop_assert_eq!(bytes.len(), e.encoded_len());
            prop_assert_eq!(decode(&bytes).unwrap().response, e.response);
        }
    }
}
