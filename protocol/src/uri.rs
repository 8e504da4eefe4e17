//! RFC 3986 normalization of the request target for fingerprints (K4).
//!
//! Two spellings of one target must fingerprint alike, but two targets a server
//! could tell apart must not. So only the equivalences RFC 3986 §6.2.2 defines
//! for every URI are applied, and nothing scheme- or server-specific:
//!
//! - percent-encoding: `%XX` of an unreserved character is decoded (`%7E` → `~`),
//!   every other `%xx` gets uppercase hex digits (`%2f` → `%2F`); reserved
//!   characters are never decoded, so `%2F` stays distinct from `/`. A `%` not
//!   followed by two hex digits is a literal percent sign and becomes `%25`: kept
//!   bare, it could pair with the octets after it once those are decoded (`%%30A`
//!   would turn into `%0A`, an encoded newline), so normalizing twice would differ
//!   from normalizing once, and two targets a server tells apart could collide.
//! - dot segments are removed (§5.2.4), after decoding, so `/a/%2E%2E/b` is `/b`.
//!   Empty segments (`//`) are kept: many servers route them differently.
//! - the query is split into `name=value` pairs on `&` and the first `=`, each
//!   side percent-normalized, and sorted bytewise by (name, value) with
//!   duplicates kept. `+` stays a literal `+` (form encoding is not guessed),
//!   `a` and `a=` are the same pair, and an empty query (`/p?`) has no pairs.

/// Splits a request target into its normalized path and sorted query pairs.
pub(crate) fn normalize(path_and_query: &str) -> (String, Vec<(String, String)>) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, query),
        None => (path_and_query, ""),
    };
    (
        remove_dot_segments(&normalize_percent(path)),
        sorted_query(query),
    )
}

fn sorted_query(query: &str) -> Vec<(String, String)> {
    if query.is_empty() {
        return Vec::new();
    }
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (normalize_percent(name), normalize_percent(value))
        })
        .collect();
    pairs.sort();
    pairs
}

/// RFC 3986 §6.2.2.1–2: decode unreserved octets, uppercase the hex of the rest.
fn normalize_percent(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escape = (b == b'%')
            .then(|| {
                Some((
                    hex_value(*bytes.get(i + 1)?)?,
                    hex_value(*bytes.get(i + 2)?)?,
                ))
            })
            .flatten();
        match escape {
            Some((high, low)) => {
                let octet = high << 4 | low;
                if is_unreserved(octet) {
                    out.push(octet);
                } else {
                    out.extend_from_slice(&[
                        b'%',
                        HEX_UPPER[usize::from(high)],
                        HEX_UPPER[usize::from(low)],
                    ]);
                }
                i += 3;
            }
            None if b == b'%' => {
                out.extend_from_slice(b"%25");
                i += 1;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    // Only ASCII sequences were replaced by ASCII, so `out` is still UTF-8;
    // the lossy fallback is unreachable and only keeps panics off this path.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// RFC 3986 §2.3: `ALPHA / DIGIT / "-" / "." / "_" / "~"`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 §5.2.4, step by step. Every pattern it matches is ASCII, so every
/// slice boundary is a character boundary.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path;
    let mut output = String::with_capacity(path.len());
    while !input.is_empty() {
        if let Some(rest) = input
            .strip_prefix("../")
            .or_else(|| input.strip_prefix("./"))
        {
            // A: a relative prefix.
            input = rest;
        } else if input.starts_with("/./") {
            // B: "/./x" → "/x".
            input = &input[2..];
        } else if input == "/." {
            // B: a final "/." → "/".
            input = "/";
        } else if input.starts_with("/../") || input == "/.." {
            // C: up one segment; "/../x" → "/x", a final "/.." → "/".
            input = if input == "/.." { "/" } else { &input[3..] };
            output.truncate(output.rfind('/').unwrap_or(0));
        } else if input == "." || input == ".." {
            // D: nothing left but dots.
            input = "";
        } else {
            // E: move the first segment (with its leading "/") to the output.
            let end = input
                .char_indices()
                .skip(1)
                .find_map(|(at, c)| (c == '/').then_some(at))
                .unwrap_or(input.len());
            output.push_str(&input[..end]);
            input = &input[end..];
        }
    }
    output
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn rfc_3986_dot_segment_examples() {
        // RFC 3986 §5.2.4 and §5.4 (the merged paths of the reference examples).
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("mid/content=5/../6"), "mid/6");
        assert_eq!(remove_dot_segments("/b/c/./g"), "/b/c/g");
        assert_eq!(remove_dot_segments("/b/c/."), "/b/c/");
        assert_eq!(remove_dot_segments("/b/c/.."), "/b/");
        assert_eq!(remove_dot_segments("/b/c/../../../g"), "/g");
        assert_eq!(remove_dot_segments("/b/c/g."), "/b/c/g.");
        assert_eq!(remove_dot_segments("/b/c/..g"), "/b/c/..g");
        assert_eq!(remove_dot_segments("/b/c/./../g"), "/b/g");
        assert_eq!(remove_dot_segments("/b/c/g;x=1/../y"), "/b/c/y");
        assert_eq!(remove_dot_segments(".."), "");
        assert_eq!(remove_dot_segments("/"), "/");
    }

    #[test]
    fn empty_segments_are_kept() {
        assert_eq!(remove_dot_segments("/a//b/"), "/a//b/");
        assert_eq!(remove_dot_segments("//a/./b"), "//a/b");
        assert_eq!(remove_dot_segments("/a//../b"), "/a/b");
    }

    #[test]
    fn percent_encoding_is_normalized_not_decoded() {
        assert_eq!(normalize_percent("%7e%41%2d%5F%2E"), "~A-_.");
        assert_eq!(normalize_percent("%2f%3a%c3%a9"), "%2F%3A%C3%A9");
        assert_eq!(normalize_percent("%zz%4%"), "%25zz%254%25");
        assert_eq!(normalize_percent("a+b é"), "a+b é");
    }

    #[test]
    fn decoded_dots_are_dot_segments() {
        assert_eq!(normalize("/a/%2E%2e/b").0, "/b");
    }

    #[test]
    fn a_lone_percent_cannot_pair_with_decoded_octets() {
        // `%30` decodes to `0`; a bare `%` before it must not form `%0A` with it.
        assert_eq!(normalize_percent("%%30A"), "%250A");
        assert_ne!(normalize("/%%30A").0, normalize("/%0A").0);
        let once = normalize_percent("%%30a");
        assert_eq!(normalize_percent(&once), once);
        assert_eq!(normalize("/a/%2E/b").0, "/a/b");
    }

    #[test]
    fn query_pairs_are_split_normalized_and_sorted() {
        let (path, query) = normalize("/p?b=2&a=%7e&a=1&c&d=x=y&e%3D=+");
        assert_eq!(path, "/p");
        let expected = [
            ("a", "1"),
            ("a", "~"),
            ("b", "2"),
            ("c", ""),
            ("d", "x=y"),
            ("e%3D", "+"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(query, expected);
    }

    #[test]
    fn an_empty_query_is_no_query() {
        assert_eq!(normalize("/p?"), normalize("/p"));
        assert_eq!(normalize("/p?").1, Vec::new());
        assert_eq!(normalize("/p?&").1.len(), 2);
    }
}
