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
//! object's members as references into the parsed nodes (`super::tree`), in
//! one list for the whole document, and writes every string and number once,
//! into one buffer.

use std::cmp::Ordering;

use super::tree::{Node, after_value};

/// An object with two members of the same name (after escapes are decoded):
/// not I-JSON, so there is no canonical form.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct DuplicateName;

/// Appends the canonical text of the document `nodes` to `out`.
pub(super) fn canonical(nodes: &[Node<'_>], out: &mut String) -> Result<(), DuplicateName> {
    let mut writer = Writer {
        out,
        numbers: ryu_js::Buffer::new(),
        members: Vec::new(),
    };
    writer.value(nodes).map(|_| ())
}

struct Writer<'n, 'a, 'o> {
    out: &'o mut String,
    numbers: ryu_js::Buffer,
    /// The (name, value) members of the objects being written, innermost
    /// last: each object sorts its own members at the end, writes them and
    /// takes them off, so one list serves the whole document.
    members: Vec<(&'n str, &'n [Node<'a>])>,
}

impl<'n, 'a> Writer<'n, 'a, '_> {
    /// Writes the value that starts `nodes`; returns the nodes after it.
    fn value(&mut self, nodes: &'n [Node<'a>]) -> Result<&'n [Node<'a>], DuplicateName> {
        let Some((node, rest)) = nodes.split_first() else {
            return Ok(nodes);
        };
        match node {
            Node::Null => self.out.push_str("null"),
            Node::Bool(true) => self.out.push_str("true"),
            Node::Bool(false) => self.out.push_str("false"),
            Node::Number(n, token) => number(*n, token, self.out, &mut self.numbers),
            Node::String(s) => string(s, self.out),
            Node::Array { span } => {
                let mut items = rest.get(..*span).unwrap_or_default();
                self.out.push('[');
                while !items.is_empty() {
                    items = self.value(items)?;
                    if !items.is_empty() {
                        self.out.push(',');
                    }
                }
                self.out.push(']');
            }
            Node::Object { span } => self.object(rest.get(..*span).unwrap_or_default())?,
        }
        Ok(after_value(nodes))
    }

    /// Writes an object whose members are `members` (each a name node, then
    /// its value's nodes), sorted by name.
    fn object(&mut self, mut members: &'n [Node<'a>]) -> Result<(), DuplicateName> {
        let first = self.members.len();
        while let Some((Node::String(name), value)) = members.split_first() {
            self.members.push((name, value));
            members = after_value(value);
        }
        let own = self.members.get_mut(first..).unwrap_or_default();
        own.sort_by(|(a, _), (b, _)| utf16_order(a, b));
        if own
            .windows(2)
            .any(|pair| matches!(pair, [(a, _), (b, _)] if a == b))
        {
            return Err(DuplicateName);
        }
        self.out.push('{');
        for i in first..self.members.len() {
            if let Some(&(name, value)) = self.members.get(i) {
                if i > first {
                    self.out.push(',');
                }
                string(name, self.out);
                self.out.push(':');
                self.value(value)?;
            }
        }
        self.out.push('}');
        self.members.truncate(first);
        Ok(())
    }
}

/// The largest integer below which every integral double is printed by
/// ECMAScript as its plain digits and is exact in an `i64`.
const PLAIN_INTEGER_BELOW: f64 = 1e15;

/// A finite number as ECMAScript prints it, read from its `token` in the body.
/// Integral values of moderate size (counts, amounts in minor units) are
/// printed as integers, and plain decimals of up to 15 digits (prices) from
/// their own digits: both are what ryu-js would print for them, without the
/// shortest-digits search, which in wasm (no 128-bit multiply) costs more than
/// the rest of a number's canonicalization.
fn number(n: f64, token: &[u8], out: &mut String, numbers: &mut ryu_js::Buffer) {
    if n.fract() == 0.0 && n.abs() < PLAIN_INTEGER_BELOW {
        // In range and integral, so the cast is exact; `-0.0` becomes `0`, as
        // ECMAScript prints it.
        #[allow(clippy::cast_possible_truncation)]
        let integer = n as i64;
        out.push_str(itoa::Buffer::new().format(integer));
    } else if let Some(decimal) = super::numbers::plain(token) {
        decimal.write_ecmascript(out);
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
            number(n, b"", &mut out, &mut numbers);
            assert_eq!(out, printed, "{n}");
        }
    }
}
