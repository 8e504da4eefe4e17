//! Properties of canonicalization checked against definitions: the token-by-
//! token exactness check against the multiset of values it replaces, and the
//! writer against `serde_json_canonicalizer`.

use proptest::prelude::*;

use super::numbers;
use super::tree::{self, Value};
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
        let Ok(mut nodes) = tree::parse(body.as_bytes()) else {
            // Out of a double's range: the document itself is refused.
            return Ok(());
        };
        let canonical = serde_json_canonicalizer::to_string(&Value(&nodes)).unwrap();
        let by_definition =
            number_values(body.as_bytes()) == number_values(canonical.as_bytes());
        let exact = numbers::read_tokens(&mut nodes, body.as_bytes());
        prop_assert_eq!(exact, by_definition, "{}", body);
    }
}

/// A number token without exponent of up to 15 significant digits, at any
/// place of the decimal point: the tokens the writer prints from their digits.
fn plain_decimal() -> impl Strategy<Value = String> {
    (any::<bool>(), 0usize..14, "[0-9]{1,14}", 0usize..15).prop_map(
        |(negative, zeros, digits, point)| {
            let digits: String = "0"
                .repeat(zeros)
                .chars()
                .chain(digits.chars())
                .take(14)
                .collect();
            let (integer, fraction) = digits.split_at(point.min(digits.len()));
            let integer = integer.trim_start_matches('0');
            let integer = if integer.is_empty() { "0" } else { integer };
            let sign = if negative { "-" } else { "" };
            if fraction.is_empty() {
                format!("{sign}{integer}")
            } else {
                format!("{sign}{integer}.{fraction}")
            }
        },
    )
}

proptest! {
    #[test]
    fn a_plain_decimal_is_written_as_ryu_js_prints_its_double(token in plain_decimal()) {
        let value: f64 = serde_json::from_str(&token).unwrap();
        let mut numbers = ryu_js::Buffer::new();
        let expected = if value == 0.0 { "0".to_owned() } else { numbers.format_finite(value).to_owned() };
        let decimal = numbers::plain(token.as_bytes());
        prop_assert!(decimal.is_some(), "{}", token);
        let mut written = String::new();
        if let Some(decimal) = decimal {
            decimal.write_ecmascript(&mut written);
        }
        prop_assert_eq!(written, expected, "{}", token);
    }
}

/// A JSON text of any shape: names and strings of any characters, control
/// characters and the ones JCS escapes included (names drawn from few, so
/// duplicates occur), numbers of every magnitude.
fn document() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        3 => "[a-c]{0,2}".boxed(),
        1 => "\\PC{0,4}".boxed(),
        1 => "[\\x00-\\x1f\"\\\\]{0,2}".boxed(),
        1 => proptest::sample::select(vec!["\u{e000}", "\u{1f600}", "\u{ffff}", "\u{10000}", "a\u{0}"])
            .prop_map(str::to_owned)
            .boxed(),
    ];
    let text = |s: String| serde_json::to_string(&s).unwrap_or_default();
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<f64>()
            .prop_filter("finite", |n| n.is_finite())
            .prop_map(|n| serde_json::to_string(&n).unwrap_or_default()),
        any::<i64>().prop_map(|n| n.to_string()),
        (-1_000_000i64..1_000_000, 0u32..6).prop_map(|(n, scale)| { format!("{n}e-{scale}") }),
        plain_decimal(),
        "\\PC{0,6}".prop_map(text),
        "[\\x00-\\x1f\"\\\\a\u{7f}]{0,4}".prop_map(text),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6)
                .prop_map(|items| format!("[{}]", items.join(","))),
            proptest::collection::vec((name.clone().prop_map(text), inner), 0..6).prop_map(
                |members| {
                    let members: Vec<String> =
                        members.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }
            ),
        ]
    })
}

proptest! {
    #[test]
    fn the_writer_agrees_with_serde_json_canonicalizer(body in document()) {
        let Ok(mut nodes) = tree::parse(body.as_bytes()) else {
            return Ok(());
        };
        let oracle = serde_json_canonicalizer::to_string(&Value(&nodes)).ok();
        // Exact or not, every number is written from its token where it can be.
        numbers::read_tokens(&mut nodes, body.as_bytes());
        let mut ours = String::new();
        let written = write::canonical(&nodes, &mut ours).is_ok().then_some(ours);
        prop_assert_eq!(written, oracle, "{}", body);
    }
}
