//! Writes a parsed tree as its RFC 8785 canonical text.
//!
//! RFC 8785 §3.2: no whitespace; literals as they are; numbers as ECMAScript's
//! `Number.prototype.toString` prints them (ryu-js); strings with only `"`, `\`
//! and the control characters escaped, the seven that have a short form using
//! it and the rest `\u00xx` in lowercase hex; object members sorted by the
//! UTF-16 code units of their names, which must be unique.
//!
//! Written here rather than through `serde_json_canonicalizer`, which the
//! tests keep as the oracle (`super::tests`): that crate serializes through
//! serde_json, buffers every member's text and sorts each object in a
//! `BTreeMap` keyed by a UTF-16 copy of the name. For a large body, that
//! allocation was most of the filter's CPU per request. This writer sorts each
//! object's members in place (the tree is ours and thrown away after) and
//! writes every string and number once, into one buffer.

use std::cmp::Ordering;

use super::tree::Tree;

/// An object with two members of the same name (after escapes are decoded):
/// not I-JSON, so there is no canonical form.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct DuplicateName;

/// Appends the canonical text of `tree` to `out`, sorting every object of the
/// tree in place on the way.
pub(super) fn canonical(tree: &mut Tree<'_>, out: &mut String) -> Result<(), DuplicateName> {
    let mut numbers = ryu_js::Buffer::new();
    value(tree, out, &mut numbers)
}

fn value(
    tree: &mut Tree<'_>,
    out: &mut String,
    numbers: &mut ryu_js::Buffer,
) -> Result<(), DuplicateName> {
    match tree {
        Tree::Null => out.push_str("null"),
        Tree::Bool(true) => out.push_str("true"),
        Tree::Bool(false) => out.push_str("false"),
        Tree::Number(n) => number(*n, out, numbers),
        Tree::String(s) => string(s, out),
        Tree::Array(items) => {
            out.push('[');
            for (i, item) in items.iter_mut().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                value(item, out, numbers)?;
            }
            out.push(']');
        }
        Tree::Object(members) => {
            members.sort_by(|(a, _), (b, _)| utf16_order(a, b));
            if members
                .windows(2)
                .any(|pair| matches!(pair, [(a, _), (b, _)] if a == b))
            {
                return Err(DuplicateName);
            }
            out.push('{');
            for (i, (name, member)) in members.iter_mut().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(name, out);
                out.push(':');
                value(member, out, numbers)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// The largest integer below which every integral double is printed by
/// ECMAScript as its plain digits and is exact in an `i64`.
const PLAIN_INTEGER_BELOW: f64 = 1e15;

/// A finite number as ECMAScript prints it. Integral values of moderate size
/// (counts, amounts in minor units) are printed as integers, which is what
/// ryu-js would print for them, without the shortest-digits search.
fn number(n: f64, out: &mut String, numbers: &mut ryu_js::Buffer) {
    if n.fract() == 0.0 && n.abs() < PLAIN_INTEGER_BELOW {
        // In range and integral, so the cast is exact; `-0.0` becomes `0`, as
        // ECMAScript prints it.
        #[allow(clippy::cast_possible_truncation)]
        let integer = n as i64;
        out.push_str(itoa::Buffer::new().format(integer));
    } else {
        out.push_str(numbers.format_finite(n));
    }
}

/// A string with RFC 8785's minimal escaping, copied in runs between escapes.
fn string(s: &str, out: &mut String) {
    out.push('"');
    let mut run_start = 0;
    for (i, byte) in s.bytes().enumerate() {
        let short = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0a => "\\n",
            0x0c => "\\f",
            0x0d => "\\r",
            0x00..=0x1f => "",
            _ => continue,
        };
        // `i` is at an ASCII byte, so both ends of the run are char boundaries.
        out.push_str(s.get(run_start..i).unwrap_or_default());
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(hex_digit(byte >> 4));
            out.push(hex_digit(byte & 0x0f));
        } else {
            out.push_str(short);
        }
        run_start = i + 1;
    }
    out.push_str(s.get(run_start..).unwrap_or_default());
    out.push('"');
}

fn hex_digit(nibble: u8) -> char {
    char::from_digit(u32::from(nibble), 16).unwrap_or('0')
}

/// Orders two names by their UTF-16 code units (RFC 8785 §3.2.3) without
/// converting them. UTF-8 byte order is code point order, and that is UTF-16
/// order except where a character above U+FFFF (4 UTF-8 bytes, a surrogate
/// pair from U+D800) meets one in U+E000–U+FFFF (3 bytes led by `EE` or `EF`):
/// there the surrogate sorts first. The first differing byte is where the two
/// names' first different characters start, or inside characters of one length
/// class, so looking at it alone decides.
fn utf16_order(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.iter().zip(b).find(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some((&x, &y)) => {
            let astral = |lead: u8| lead >= 0xf0;
            let high_bmp = |lead: u8| lead == 0xee || lead == 0xef;
            if astral(x) && high_bmp(y) {
                Ordering::Less
            } else if high_bmp(x) && astral(y) {
                Ordering::Greater
            } else {
                x.cmp(&y)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn utf16(s: &str) -> Vec<u16> {
        s.encode_utf16().collect()
    }

    #[test]
    fn name_order_is_utf16_order_across_length_classes() {
        let names = [
            "",
            "a",
            "ab",
            "b",
            "\u{7f}",
            "\u{80}",
            "\u{7ff}",
            "\u{800}",
            "\u{d7ff}",
            "\u{e000}",
            "\u{fb33}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "\u{10ffff}",
            "a\u{1f600}",
            "a\u{ffff}",
            "\u{e000}b",
            "\u{10000}a",
        ];
        for a in names {
            for b in names {
                assert_eq!(utf16_order(a, b), utf16(a).cmp(&utf16(b)), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn control_characters_use_the_short_escape_or_lowercase_hex() {
        let mut out = String::new();
        string("a\u{1}\u{8}\u{1f}\"\\é\u{7f}", &mut out);
        assert_eq!(out, r#""a\u0001\b\u001f\"\\é"#.to_owned() + "\u{7f}\"");
    }

    #[test]
    fn integral_numbers_print_as_ecmascript_prints_them() {
        let mut numbers = ryu_js::Buffer::new();
        for (n, printed) in [
            (0.0, "0"),
            (-0.0, "0"),
            (-42.0, "-42"),
            (999_999_999_999_999.0, "999999999999999"),
            (1e15, "1000000000000000"),
            (1e21, "1e+21"),
            (0.5, "0.5"),
        ] {
            let mut out = String::new();
            number(n, &mut out, &mut numbers);
            assert_eq!(out, printed, "{n}");
        }
    }
}
