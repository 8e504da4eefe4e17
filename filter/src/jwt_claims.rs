//! K2: reading a `jwt_authn` claim with its JSON type.
//!
//! Envoy answers a property path into the claims with the leaf's bytes, but
//! drops its type: a string comes back as its UTF-8, a number as an 8-byte
//! double, a boolean as one byte, an object or a list as proxy-wasm's
//! serialized pairs (checked on Envoy 1.40). A double's eight bytes can all be
//! printable — `2261634.5098039214` is `AAAAAAAA` — so no look at the bytes
//! can tell a numeric claim from a string one. The whole `metadata` property,
//! though, is the protobuf `envoy.config.core.v3.Metadata` (checked), whose
//! `google.protobuf.Value`s keep the JSON type. This module decodes just enough
//! of it to find `filter_metadata["envoy.filters.http.jwt_authn"][key]` and
//! walk the claim path, so only a real JSON string becomes a principal.
//!
//! The decoder is total: truncated or foreign bytes give [`Claim::Unreadable`],
//! never a panic.

/// The filter under which `jwt_authn` writes its `payload_in_metadata`.
pub const JWT_AUTHN_FILTER: &str = "envoy.filters.http.jwt_authn";

/// What a claim path leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nothing there (no token, no such claim, a path through a non-object).
    Absent,
    /// A JSON string.
    String(Vec<u8>),
    /// A number, boolean, null, object or list: never a principal.
    NotAString,
    /// The metadata could not be decoded.
    Unreadable,
}

/// Finds `claim` (one segment per nested object) under `metadata_key` in the
/// protobuf-encoded dynamic `metadata`.
pub fn find(metadata: &[u8], metadata_key: &str, claim: &[String]) -> Claim {
    match walk(metadata, metadata_key, claim) {
        Ok(Some(value)) => value,
        Ok(None) => Claim::Absent,
        Err(Malformed) => Claim::Unreadable,
    }
}

/// The bytes are not the protobuf they should be.
struct Malformed;

fn walk(metadata: &[u8], metadata_key: &str, claim: &[String]) -> Result<Option<Claim>, Malformed> {
    // Metadata { map<string, Struct> filter_metadata = 1; … }
    let Some(filter) = map_entry(metadata, 1, JWT_AUTHN_FILTER)? else {
        return Ok(None);
    };
    // Struct { map<string, Value> fields = 1; }: the payload is a Value.
    let Some(mut value) = map_entry(filter, 1, metadata_key)? else {
        return Ok(None);
    };
    for segment in claim {
        // Value { … Struct struct_value = 5; … }
        let Some(object) = value_field(value, STRUCT_VALUE)? else {
            return Ok(None);
        };
        match map_entry(object, 1, segment)? {
            Some(inner) => value = inner,
            None => return Ok(None),
        }
    }
    Ok(Some(match value_field(value, STRING_VALUE)? {
        Some(text) => Claim::String(text.to_vec()),
        None => Claim::NotAString,
    }))
}

/// `google.protobuf.Value` field numbers used here.
const STRING_VALUE: u64 = 3;
const STRUCT_VALUE: u64 = 5;

/// The length-delimited field `number` of a `Value` message, if set (a
/// `oneof`, so the last one set wins, as in protobuf itself).
fn value_field(value: &[u8], number: u64) -> Result<Option<&[u8]>, Malformed> {
    let mut found = None;
    let mut kind = None;
    for field in fields(value) {
        let (n, payload) = field?;
        kind = Some(n);
        if n == number
            && let Payload::Bytes(bytes) = payload
        {
            found = Some(bytes);
        }
    }
    // Another member of the oneof set after ours replaces it.
    Ok(found.filter(|_| kind == Some(number)))
}

/// The value of the entry with `key` in the map field `number` of a message
/// (map entries are messages `{ key = 1; value = 2; }`); the last entry with
/// that key wins, as protobuf parsers do.
fn map_entry<'a>(message: &'a [u8], number: u64, key: &str) -> Result<Option<&'a [u8]>, Malformed> {
    let mut found = None;
    for field in fields(message) {
        let (n, payload) = field?;
        let Payload::Bytes(entry) = payload else {
            continue;
        };
        if n != number {
            continue;
        }
        let (mut entry_key, mut entry_value) = (None, None);
        for inner in fields(entry) {
            match inner? {
                (1, Payload::Bytes(bytes)) => entry_key = Some(bytes),
                (2, Payload::Bytes(bytes)) => entry_value = Some(bytes),
                _ => {}
            }
        }
        if entry_key == Some(key.as_bytes()) {
            found = Some(entry_value.unwrap_or_default());
        }
    }
    Ok(found)
}

/// A field's payload.
enum Payload<'a> {
    /// Wire type 2: a string, bytes or an embedded message.
    Bytes(&'a [u8]),
    /// Any other wire type (varint, fixed32, fixed64), skipped.
    Scalar,
}

/// The fields of a message, in order.
fn fields(message: &[u8]) -> impl Iterator<Item = Result<(u64, Payload<'_>), Malformed>> {
    let mut rest = message;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        Some(next_field(&mut rest))
    })
    .scan(false, |failed, field| {
        // Stop after the first error: the rest cannot be framed.
        if *failed {
            return None;
        }
        *failed = field.is_err();
        Some(field)
    })
}

fn next_field<'a>(rest: &mut &'a [u8]) -> Result<(u64, Payload<'a>), Malformed> {
    let tag = varint(rest)?;
    let number = tag >> 3;
    let payload = match tag & 7 {
        0 => {
            varint(rest)?;
            Payload::Scalar
        }
        1 => {
            take(rest, 8)?;
            Payload::Scalar
        }
        2 => {
            let len = usize::try_from(varint(rest)?).map_err(|_| Malformed)?;
            Payload::Bytes(take(rest, len)?)
        }
        5 => {
            take(rest, 4)?;
            Payload::Scalar
        }
        _ => return Err(Malformed),
    };
    Ok((number, payload))
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], Malformed> {
    if rest.len() < n {
        return Err(Malformed);
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn varint(rest: &mut &[u8]) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, tail) = rest.split_first().ok_or(Malformed)?;
        *rest = tail;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Malformed)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What Envoy 1.40 returned for the `metadata` property behind
    /// `jwt_authn` (`payload_in_metadata: jwt_payload`) with the token
    /// `{"sub": "svc", "n": 2261634.5098039214, "b": true, "l": ["x", "y"],
    /// "act": {"sub": "ada", "x": 1}, "iss": …}`.
    const CAPTURED: &str = "0ac2010a1c656e766f792e66696c746572732e687474702e6a77745f617574686e12a1010a9e010a0b6a77745f7061796c6f6164128e012a8b010a110a016c120c320a0a031a01780a031a01790a270a0361637412202a1e0a0c0a0373756212051a036164610a0e0a0178120911000000000000f03f0a0e0a016e12091141414141414141410a260a03697373121f1a1d68747470733a2f2f6973737565722e6b6579666c696768742e746573740a070a0162120220010a0c0a0373756212051a03737663";

    fn captured() -> Vec<u8> {
        hex::decode(CAPTURED).expect("hex")
    }

    fn claim(path: &str) -> Claim {
        let segments: Vec<String> = path.split('.').map(str::to_owned).collect();
        find(&captured(), "jwt_payload", &segments)
    }

    #[test]
    fn strings_are_found_by_path() {
        assert_eq!(claim("sub"), Claim::String(b"svc".to_vec()));
        assert_eq!(claim("act.sub"), Claim::String(b"ada".to_vec()));
        assert_eq!(
            claim("iss"),
            Claim::String(b"https://issuer.keyflight.test".to_vec())
        );
    }

    #[test]
    fn numbers_booleans_objects_and_lists_are_not_strings() {
        // `n`'s double is eight printable bytes ("AAAAAAAA") as a property.
        for path in ["n", "b", "l", "act", "act.x"] {
            assert_eq!(claim(path), Claim::NotAString, "{path}");
        }
    }

    #[test]
    fn missing_claims_and_paths_through_non_objects_are_absent() {
        for path in ["nope", "act.nope", "sub.x", "n.x", "l.x"] {
            assert_eq!(claim(path), Claim::Absent, "{path}");
        }
        assert_eq!(
            find(&captured(), "other_payload", &["sub".to_owned()]),
            Claim::Absent
        );
        assert_eq!(find(&[], "jwt_payload", &["sub".to_owned()]), Claim::Absent);
    }

    #[test]
    fn truncated_metadata_is_unreadable_or_absent_never_a_wrong_string() {
        let bytes = captured();
        for cut in 0..bytes.len() {
            match find(&bytes[..cut], "jwt_payload", &["sub".to_owned()]) {
                Claim::String(s) => assert_eq!(s, b"svc", "cut at {cut}"),
                Claim::Absent | Claim::Unreadable | Claim::NotAString => {}
            }
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = find(&bytes, "jwt_payload", &["sub".to_owned(), "x".to_owned()]);
        }
    }
}
