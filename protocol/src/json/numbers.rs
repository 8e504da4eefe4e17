//! The K4 exactness check: every number token of the body compared, as a
//! decimal value, with the number the canonical text prints for it; and
//! the canonical text of the tokens that need no ryu-js to print.

use super::tree::Node;

/// The most significant digits a double's shortest representation has.
const MAX_DIGITS: usize = 17;

/// The significant decimal digits every double holds exactly (C's `DBL_DIG`).
const DBL_DIG: usize = 15;

/// Gives every number node its token in `body` (nodes and tokens are both
/// in document order) and says whether every token is exact: denotes the
/// same decimal value as the number the canonical text prints for it. One
/// pass for both, as the tokens are found by scanning the whole body.
///
/// The token's value is the node's, as serde_json read the document, printed
/// with ryu-js, as the canonicalizer prints it. Comparing token by token is
/// the multiset comparison of the body's and the canonical text's numbers,
/// without building it: canonicalization moves whole members, and a printed
/// number re-reads as itself, so a lossy token can never be matched by
/// another token's printed value.
pub(super) fn read_tokens<'a>(nodes: &mut [Node<'a>], body: &'a [u8]) -> bool {
    let mut tokens = tokens(body);
    let mut printed = ryu_js::Buffer::new();
    nodes.iter_mut().all(|node| match node {
        Node::Number(value, token) => {
            *token = tokens.next().unwrap_or_default();
            few_digits(token) || same_value(token, printed.format_finite(*value).as_bytes())
        }
        _ => true,
    })
}

/// Whether `token` is a plain decimal (no exponent) of at most 15 digits, and
/// so exact without parsing or printing it. A double keeps any decimal of 15
/// significant digits (its `DBL_DIG`): two different such decimals never round
/// to the same double. The printed form is the shortest decimal that rounds
/// back to the double, so it has no more digits than the token and is that same
/// value. Without an exponent, 15 digits stay far inside a double's normal
/// range, where that holds. Amounts and counts, almost every number a request
/// carries, take this path.
fn few_digits(token: &[u8]) -> bool {
    token
        .iter()
        .all(|&b| b.is_ascii_digit() || b == b'-' || b == b'.')
        && token.iter().filter(|b| b.is_ascii_digit()).count() <= DBL_DIG
}

/// Whether two JSON number tokens denote the same decimal value.
pub(super) fn same_value(a: &[u8], b: &[u8]) -> bool {
    match (Decimal::parse(a), Decimal::parse(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The value of `token` when it is a plain decimal of at most 15 digits
/// ([`few_digits`]): such a value is the shortest decimal of its double, so its
/// canonical text can be written from the token's own digits
/// ([`Decimal::write_ecmascript`]) without finding them again with ryu-js.
pub(super) fn plain(token: &[u8]) -> Option<Decimal> {
    if token.iter().any(u8::is_ascii_digit) && few_digits(token) {
        Decimal::parse(token)
    } else {
        None
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

    /// Appends the value as ECMAScript's `Number.prototype.toString` prints a
    /// double whose shortest digits are these (ECMA-262 Number::toString, with
    /// n the position of the decimal point relative to the first digit): plain
    /// digits up to 21 integer places, a leading `0.` down to six zeros after
    /// the point, exponent notation beyond; zero as `0`, never `-0`.
    pub(super) fn write_ecmascript(&self, out: &mut String) {
        let digits = self.digits.get(..self.len).unwrap_or_default();
        let Some((first, rest)) = digits.split_first() else {
            out.push('0');
            return;
        };
        if self.negative {
            out.push('-');
        }
        let push = |out: &mut String, digits: &[u8]| {
            digits.iter().for_each(|&d| out.push(char::from(d)));
        };
        let k = i64::try_from(self.len).unwrap_or(i64::MAX);
        let n = self.exponent.saturating_add(k);
        if (k..=21).contains(&n) {
            push(out, digits);
            (k..n).for_each(|_| out.push('0'));
        } else if (1..=21).contains(&n) {
            let (integer, fraction) = digits.split_at(usize::try_from(n).unwrap_or(0));
            push(out, integer);
            out.push('.');
            push(out, fraction);
        } else if (-5..=0).contains(&n) {
            out.push_str("0.");
            (n..0).for_each(|_| out.push('0'));
            push(out, digits);
        } else {
            out.push(char::from(*first));
            if !rest.is_empty() {
                out.push('.');
                push(out, rest);
            }
            out.push_str(if n > 0 { "e+" } else { "e-" });
            out.push_str(itoa::Buffer::new().format(n.saturating_sub(1).unsigned_abs()));
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

    fn exact(json: &[u8]) -> bool {
        let mut nodes = super::super::tree::parse(json).unwrap();
        read_tokens(&mut nodes, json)
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
    fn only_plain_tokens_of_fifteen_digits_skip_the_check() {
        for plain in [
            "0",
            "-0",
            "123456789012345",
            "-1234567.89012345",
            "0.00000000000001",
        ] {
            assert!(few_digits(plain.as_bytes()), "{plain}");
        }
        for checked in [
            "1234567890123456",
            "0.000000000000001",
            "1e5",
            "1E5",
            "9007199254740993",
        ] {
            assert!(!few_digits(checked.as_bytes()), "{checked}");
        }
    }

    #[test]
    fn tokens_skip_strings_and_escapes() {
        let json = br#"{"a1":"x\"2\\","b":[-3.5e+2,4],"c":"5"}"#;
        let found: Vec<&[u8]> = tokens(json).collect();
        assert_eq!(found, vec![&b"-3.5e+2"[..], b"4"]);
    }
}
