//! RFC 8785 (JCS) canonical JSON for fingerprints, with the K4 exactness rule.
//!
//! Canonicalization itself is `serde_json_canonicalizer`'s; this module adds the
//! two things JCS leaves to its caller:
//!
//! - **I-JSON input.** RFC 8785 is defined for I-JSON (RFC 7493), which forbids
//!   duplicate object keys. `serde_json::Value` would silently keep the last
//!   duplicate, so `{"amount":1,"amount":2}` and `{"amount":2}` would look
//!   equal. The body is therefore parsed into a tree of its own that keeps every
//!   member, and the canonicalizer rejects duplicates (compared after escape
//!   decoding, so `"a"` and `"\u0061"` clash): such a body is digested raw
//!   ([`RawReason::InvalidJson`]). Lone surrogates, invalid UTF-8, trailing
//!   garbage, and nesting deeper than serde_json's limit of 128 are rejected by
//!   the parser the same way.
//! - **Exact numbers.** JCS prints every number as the shortest double that
//!   round-trips, so an integer beyond 2^53 or a decimal with more digits than a
//!   double holds would change value. Every number token of the body is compared
//!   with the number tokens of the canonical text; if they do not denote the same
//!   multiset of decimal values the body is digested raw
//!   ([`RawReason::LossyNumber`]). A multiset is compared rather than a sequence
//!   because canonicalization reorders object members, and it is exact: a
//!   canonical number's text always re-canonicalizes to itself, so a lossy
//!   number can never be "replaced" by another exact one.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::fingerprint::RawReason;

/// The RFC 8785 canonical form of `body`, or why the raw bytes must be used.
pub fn canonicalize(body: &[u8]) -> Result<String, RawReason> {
    let tree: Tree = serde_json::from_slice(body).map_err(|_| RawReason::InvalidJson)?;
    let canonical =
        serde_json_canonicalizer::to_string(&tree).map_err(|_| RawReason::InvalidJson)?;
    if numbers::same_values(body, canonical.as_bytes()) {
        Ok(canonical)
    } else {
        Err(RawReason::LossyNumber)
    }
}

/// A parsed JSON document that keeps object members as sent, duplicates
/// included, so the canonicalizer can refuse them.
enum Tree {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Tree>),
    Object(Vec<(String, Tree)>),
}

/// With serde_json's `arbitrary_precision` feature (never enabled by this
/// crate, but features unify across a build), numbers reach a visitor as a map
/// with this single key. Refusing it makes such a build digest JSON raw instead
/// of silently hashing a different canonical form.
const ARBITRARY_PRECISION_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Tree, E> {
        Ok(Tree::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Tree, E> {
        Ok(Tree::Bool(v))
    }

    // JCS treats every number as an IEEE 754 double (the canonicalizer converts
    // integers the same way); the exactness check catches what this rounds.
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tree, E> {
        Ok(Tree::Number(v as f64))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tree, E> {
        Ok(Tree::Number(v as f64))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tree, E> {
        Ok(Tree::Number(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tree, E> {
        Ok(Tree::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Tree, E> {
        Ok(Tree::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Tree::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == ARBITRARY_PRECISION_TOKEN {
                return Err(de::Error::custom(
                    "serde_json arbitrary_precision is not supported",
                ));
            }
            members.push((key, map.next_value()?));
        }
        Ok(Tree::Object(members))
    }
}

impl Serialize for Tree {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Tree::Null => serializer.serialize_unit(),
            Tree::Bool(b) => serializer.serialize_bool(*b),
            Tree::Number(n) => serializer.serialize_f64(*n),
            Tree::String(s) => serializer.serialize_str(s),
            Tree::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Tree::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (key, value) in members {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

/// The K4 exactness check: number tokens compared as decimal values.
mod numbers {
    /// True when the number tokens of `original` and `canonical` (both valid
    /// JSON) denote the same multiset of decimal values.
    pub(super) fn same_values(original: &[u8], canonical: &[u8]) -> bool {
        let mut sent = values(original);
        let mut kept = values(canonical);
        sent.sort_unstable();
        kept.sort_unstable();
        sent == kept
    }

    fn values(json: &[u8]) -> Vec<Decimal> {
        tokens(json).map(Decimal::parse).collect()
    }

    /// The number tokens of a valid JSON text, in order. Strings are skipped
    /// (with their escapes), so digits inside them never count.
    fn tokens(json: &[u8]) -> impl Iterator<Item = &[u8]> {
        let mut i = 0;
        std::iter::from_fn(move || {
            while let Some(&b) = json.get(i) {
                match b {
                    b'"' => i = skip_string(json, i + 1),
                    b'-' | b'0'..=b'9' => {
                        let start = i;
                        while json.get(i).is_some_and(|c| {
                            matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                        }) {
                            i += 1;
                        }
                        return json.get(start..i);
                    }
                    _ => i += 1,
                }
            }
            None
        })
    }

    /// The index just past the string whose contents start at `i`.
    fn skip_string(json: &[u8], mut i: usize) -> usize {
        while let Some(&b) = json.get(i) {
            match b {
                b'\\' => i += 2,
                b'"' => return i + 1,
                _ => i += 1,
            }
        }
        i
    }

    /// A decimal value as `(-1)^negative × digits × 10^exponent`, normalized so
    /// that equal values are equal structs: no leading or trailing zeros in
    /// `digits`, and zero (including `-0`) is `{false, [], 0}`.
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    pub(super) struct Decimal {
        negative: bool,
        digits: Vec<u8>,
        exponent: i64,
    }

    impl Decimal {
        /// Parses a JSON number token. Exponents too large for `i64` saturate,
        /// which cannot make two values equal by mistake: a canonical number's
        /// exponent is always within a few hundred.
        pub(super) fn parse(token: &[u8]) -> Decimal {
            let (negative, rest) = match token.split_first() {
                Some((b'-', rest)) => (true, rest),
                _ => (false, token),
            };
            let (mantissa, exponent_text) = split_once(rest, |b| matches!(b, b'e' | b'E'));
            let (integer, fraction) = split_once(mantissa, |b| b == b'.');
            let all_digits: Vec<u8> = integer.iter().chain(fraction).copied().collect();
            // Without its leading zeros, then without its trailing ones.
            let significant = all_digits
                .iter()
                .position(|&d| d != b'0')
                .map_or(&[][..], |first| all_digits.get(first..).unwrap_or_default());
            let trailing = significant.iter().rev().take_while(|&&d| d == b'0').count();
            let digits = significant
                .get(..significant.len() - trailing)
                .unwrap_or_default()
                .to_vec();
            if digits.is_empty() {
                return Decimal {
                    negative: false,
                    digits,
                    exponent: 0,
                };
            }
            let exponent = parse_exponent(exponent_text)
                .saturating_sub(i64::try_from(fraction.len()).unwrap_or(i64::MAX))
                .saturating_add(i64::try_from(trailing).unwrap_or(i64::MAX));
            Decimal {
                negative,
                digits,
                exponent,
            }
        }
    }

    /// `bytes` before and after the first byte that `is_separator` accepts
    /// (the separator itself dropped); all of `bytes` and nothing without one.
    fn split_once(bytes: &[u8], is_separator: impl Fn(u8) -> bool) -> (&[u8], &[u8]) {
        match bytes
            .iter()
            .position(|&b| is_separator(b))
            .and_then(|at| bytes.split_at_checked(at))
        {
            Some((head, tail)) => (head, tail.get(1..).unwrap_or_default()),
            None => (bytes, &[]),
        }
    }

    fn parse_exponent(text: &[u8]) -> i64 {
        let (negative, digits) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            Some((b'+', rest)) => (false, rest),
            _ => (false, text),
        };
        let magnitude = digits.iter().fold(0i64, |acc, d| {
            acc.saturating_mul(10)
                .saturating_add(i64::from(d.wrapping_sub(b'0')))
        });
        if negative { -magnitude } else { magnitude }
    }

    #[cfg(test)]
    mod tests {
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        use wasm_bindgen_test::wasm_bindgen_test as test;

        use super::*;

        fn d(token: &str) -> Decimal {
            Decimal::parse(token.as_bytes())
        }

        #[test]
        fn spellings_of_one_value_are_equal() {
            for same in ["1", "1.0", "1e0", "10e-1", "0.1e1", "1.000E+0", "001"] {
                assert_eq!(d(same), d("1"), "{same}");
            }
            for zero in ["0", "-0", "0.0", "-0e5", "0e-9"] {
                assert_eq!(d(zero), d("0"), "{zero}");
            }
            assert_eq!(d("1e21"), d("1000000000000000000000"));
            assert_eq!(d("0.000001"), d("1e-6"));
            assert_eq!(d("-1.5"), d("-15e-1"));
        }

        #[test]
        fn different_values_differ() {
            assert_ne!(d("1"), d("-1"));
            assert_ne!(d("9007199254740993"), d("9007199254740992"));
            assert_ne!(d("1.00000000000000000001"), d("1"));
            assert_ne!(d("1e400"), d("1e401"));
            assert_ne!(d("1e-99999999999999999999999"), d("0"));
        }

        #[test]
        fn tokens_skip_strings_and_escapes() {
            let json = br#"{"a1":"x\"2\\","b":[-3.5e+2,4],"c":"5"}"#;
            let found: Vec<&[u8]> = tokens(json).collect();
            assert_eq!(found, vec![&b"-3.5e+2"[..], b"4"]);
        }
    }
}
