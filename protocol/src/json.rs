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
//!   double holds would change value. Each number token of the body is read as
//!   the canonicalizer reads it (serde_json's parse to a double) and printed as
//!   it prints it (ryu-js, ES6 `Number.prototype.toString`); if any printed
//!   number denotes another decimal value than its token, the body is digested
//!   raw ([`RawReason::LossyNumber`]). This is the canonical text's numbers
//!   compared with the body's, one by one, without building the multiset
//!   (canonicalization reorders members, never numbers within a value).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::fingerprint::RawReason;

/// The RFC 8785 canonical form of `body`, or why the raw bytes must be used.
pub fn canonicalize(body: &[u8]) -> Result<String, RawReason> {
    let tree: Tree<'_> = serde_json::from_slice(body).map_err(|_| RawReason::InvalidJson)?;
    if !numbers::exact(body) {
        return Err(RawReason::LossyNumber);
    }
    serde_json_canonicalizer::to_string(&tree).map_err(|_| RawReason::InvalidJson)
}

/// A parsed JSON document that keeps object members as sent, duplicates
/// included, so the canonicalizer can refuse them. Strings without escapes
/// borrow from the body: a large document is parsed without a copy of each.
enum Tree<'a> {
    Null,
    Bool(bool),
    Number(f64),
    String(Cow<'a, str>),
    Array(Vec<Tree<'a>>),
    Object(Vec<(Cow<'a, str>, Tree<'a>)>),
}

/// With serde_json's `arbitrary_precision` feature (never enabled by this
/// crate, but features unify across a build), numbers reach a visitor as a map
/// with this single key. Refusing it makes such a build digest JSON raw instead
/// of silently hashing a different canonical form.
const ARBITRARY_PRECISION_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Deserialize<'de> for Tree<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }
}

/// An object member's name, borrowed from the body when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object member name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Tree<'de>, E> {
        Ok(Tree::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Tree<'de>, E> {
        Ok(Tree::Bool(v))
    }

    // JCS treats every number as an IEEE 754 double (the canonicalizer converts
    // integers the same way); the exactness check catches what this rounds.
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tree<'de>, E> {
        Ok(Tree::Number(v as f64))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tree<'de>, E> {
        Ok(Tree::Number(v as f64))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tree<'de>, E> {
        Ok(Tree::Number(v))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Tree<'de>, E> {
        Ok(Tree::String(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tree<'de>, E> {
        Ok(Tree::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Tree<'de>, E> {
        Ok(Tree::String(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Tree::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree<'de>, A::Error> {
        let mut members = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
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

impl Serialize for Tree<'_> {
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
                    map.serialize_entry(&**key, value)?;
                }
                map.end()
            }
        }
    }
}

/// The K4 exactness check: number tokens compared as decimal values.
mod numbers {
    /// The most significant digits a double's shortest representation has.
    const MAX_DIGITS: usize = 17;

    /// True when every number token of `json` (valid JSON) denotes the same
    /// decimal value as the number the canonicalizer prints for it.
    ///
    /// The token is read with serde_json, as the document was, and printed
    /// with ryu-js, as the canonicalizer prints it. Comparing token by token
    /// is the multiset comparison of the body's and the canonical text's
    /// numbers, without building it: canonicalization moves whole members,
    /// and a printed number re-reads as itself, so a lossy token can never be
    /// matched by another token's printed value.
    pub(super) fn exact(json: &[u8]) -> bool {
        let mut printed = ryu_js::Buffer::new();
        tokens(json).all(|token| match serde_json::from_slice::<f64>(token) {
            Ok(value) if value.is_finite() => {
                same_value(token, printed.format_finite(value).as_bytes())
            }
            _ => false,
        })
    }

    /// Whether two JSON number tokens denote the same decimal value.
    pub(super) fn same_value(a: &[u8], b: &[u8]) -> bool {
        match (Decimal::parse(a), Decimal::parse(b)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
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
    /// `digits`, and zero (including `-0`) is all zeros. Held on the stack: a
    /// value with more significant digits than a double can print is never
    /// equal to a printed one, and [`Decimal::parse`] says `None` for it.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) struct Decimal {
        negative: bool,
        digits: [u8; MAX_DIGITS],
        len: usize,
        exponent: i64,
    }

    impl Decimal {
        /// Parses a JSON number token; `None` when it has more than
        /// [`MAX_DIGITS`] significant digits. Exponents too large for `i64`
        /// saturate, which cannot make two values equal by mistake: a printed
        /// number's exponent is always within a few hundred.
        pub(super) fn parse(token: &[u8]) -> Option<Decimal> {
            let (negative, rest) = match token.split_first() {
                Some((b'-', rest)) => (true, rest),
                _ => (false, token),
            };
            let (mantissa, exponent_text) = split_once(rest, |b| matches!(b, b'e' | b'E'));
            let (integer, fraction) = split_once(mantissa, |b| b == b'.');
            let all = integer.iter().chain(fraction);
            let leading = all.clone().take_while(|&&d| d == b'0').count();
            let significant = integer.len() + fraction.len() - leading;
            let trailing = integer
                .iter()
                .chain(fraction)
                .rev()
                .take(significant)
                .take_while(|&&d| d == b'0')
                .count();
            let len = significant - trailing;
            if len == 0 {
                return Some(Decimal {
                    negative: false,
                    digits: [0; MAX_DIGITS],
                    len: 0,
                    exponent: 0,
                });
            }
            if len > MAX_DIGITS {
                return None;
            }
            let mut digits = [0; MAX_DIGITS];
            for (slot, digit) in digits.iter_mut().zip(all.skip(leading).take(len)) {
                *slot = *digit;
            }
            let exponent = parse_exponent(exponent_text)
                .saturating_sub(i64::try_from(fraction.len()).unwrap_or(i64::MAX))
                .saturating_add(i64::try_from(trailing).unwrap_or(i64::MAX));
            Some(Decimal {
                negative,
                digits,
                len,
                exponent,
            })
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

        fn d(token: &str) -> Option<Decimal> {
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
        fn more_digits_than_a_double_prints_never_equal_a_printed_value() {
            assert_eq!(d("12345678901234567"), d("1.2345678901234567e16"));
            assert!(d("123456789012345678").is_none(), "18 significant digits");
            assert!(
                d("1.000000000000000000000").is_some(),
                "trailing zeros are not significant"
            );
            assert!(!same_value(b"123456789012345678", b"123456789012345680"));
        }

        #[test]
        fn exactness_is_checked_token_by_token() {
            assert!(exact(
                br#"{"b":[1.5,2,-0],"a":1e2,"c":"99999999999999999999"}"#
            ));
            assert!(!exact(br#"{"a":9007199254740993}"#), "beyond 2^53");
            assert!(
                !exact(br#"[0.1000000000000000055511151231257827]"#),
                "more digits than a double"
            );
            assert!(exact(br#"[1.0, 1e0, 10e-1, 0.5e1]"#));
            assert!(!exact(br#"{"z":1,"a":[2,3.00000000000000000001]}"#));
        }

        #[test]
        fn tokens_skip_strings_and_escapes() {
            let json = br#"{"a1":"x\"2\\","b":[-3.5e+2,4],"c":"5"}"#;
            let found: Vec<&[u8]> = tokens(json).collect();
            assert_eq!(found, vec![&b"-3.5e+2"[..], b"4"]);
        }
    }
}

/// The token-by-token exactness check against the definition it replaces: the
/// multiset of the body's number values equals the canonical text's.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod exactness_matches_the_multiset_definition {
    use proptest::prelude::*;

    use super::*;

    /// A token's value as (negative, significant digits, exponent), any length.
    fn value(token: &[u8]) -> (bool, Vec<u8>, i64) {
        let text = std::str::from_utf8(token).unwrap_or_default();
        let (negative, text) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = text
            .split_once(['e', 'E'])
            .map_or((text, 0), |(m, e)| (m, e.parse::<i64>().unwrap_or(0)));
        let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits: Vec<u8> = format!("{integer}{fraction}").bytes().collect();
        let first = digits
            .iter()
            .position(|&d| d != b'0')
            .unwrap_or(digits.len());
        let last = digits
            .iter()
            .rposition(|&d| d != b'0')
            .map_or(first, |i| i + 1);
        let significant = digits.get(first..last).unwrap_or_default().to_vec();
        if significant.is_empty() {
            return (false, Vec::new(), 0);
        }
        let exponent = exponent - i64::try_from(fraction.len()).unwrap_or(0)
            + i64::try_from(digits.len() - last).unwrap_or(0);
        (negative, significant, exponent)
    }

    fn number_values(json: &[u8]) -> Vec<(bool, Vec<u8>, i64)> {
        let mut values: Vec<_> = tokens_for_test(json).map(value).collect();
        values.sort();
        values
    }

    /// Number tokens of a document whose strings hold no digits, `e` or `E`.
    fn tokens_for_test(json: &[u8]) -> impl Iterator<Item = &[u8]> {
        json.split(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
            .filter(|t| !t.is_empty())
    }

    fn number() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            "[0-9]{1,25}",
            proptest::option::of("[0-9]{1,25}"),
            proptest::option::of(-400i32..400),
        )
            .prop_map(|(negative, integer, fraction, exponent)| {
                let integer = integer.trim_start_matches('0');
                let integer = if integer.is_empty() { "0" } else { integer };
                let mut token = format!("{}{integer}", if negative { "-" } else { "" });
                if let Some(fraction) = fraction {
                    token.push('.');
                    token.push_str(&fraction);
                }
                if let Some(exponent) = exponent {
                    token.push_str(&format!("e{exponent}"));
                }
                token
            })
    }

    proptest! {
        #[test]
        fn token_by_token_equals_the_multiset_of_values(
            numbers in proptest::collection::vec(number(), 1..12),
        ) {
            // Keys out of order, so canonicalization reorders the members.
            let members: Vec<String> = numbers
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let key = char::from(b'z' - u8::try_from(i).unwrap_or(0));
                    format!("\"{key}\":{n}")
                })
                .collect();
            let body = format!("{{{}}}", members.join(","));
            let Ok(tree) = serde_json::from_slice::<Tree<'_>>(body.as_bytes()) else {
                // Out of a double's range: the document itself is refused.
                return Ok(());
            };
            let canonical = serde_json_canonicalizer::to_string(&tree).unwrap();
            let by_definition =
                number_values(body.as_bytes()) == number_values(canonical.as_bytes());
            prop_assert_eq!(numbers::exact(body.as_bytes()), by_definition, "{}", body);
        }
    }
}
