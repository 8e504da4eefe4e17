//! The request target as keyflight reads it: one normal form for the scope
//! and the fingerprint (K3, K4), and a resolved form for policy matching (F0).
//!
//! The two forms err in opposite directions on purpose:
//!
//! - **Identity** ([`normalize`]) may only equate targets that no upstream can
//!   tell apart, because two requests with one fingerprint get one answer. So it
//!   applies nothing but the percent-encoding equivalences of RFC 3986 §6.2.2.1–2,
//!   which every decoder agrees on: `%XX` of an unreserved character is decoded
//!   (`%7E` → `~`, `%2E` → `.`), every other `%xx` gets uppercase hex digits
//!   (`%2f` → `%2F`), and reserved characters stay encoded, so `%2F` is not `/`.
//!   A `%` not followed by two hex digits is a literal percent sign and becomes
//!   `%25`: kept bare, it could pair with the octets after it once those are
//!   decoded (`%%30A` would turn into `%0A`), and normalizing twice would differ
//!   from normalizing once. Dot segments (`/x/../p`) and empty segments (`//p`)
//!   are kept: an upstream that receives them raw may route them anywhere (Python's
//!   `urlsplit` keeps both, Node's `URL` keeps `//`), and Envoy's own
//!   `normalize_path`/`merge_slashes` settle them before the filter sees the
//!   request when a deployment wants them settled.
//! - **Matching** ([`match_paths`]) must never miss a target an upstream could
//!   route to a guarded handler, or `require_key` could be bypassed. A policy
//!   matches when any reading of the identity form matches: as it is, with every
//!   `%XX` decoded once (so `%2F` is `/`), with dot segments removed (RFC 3986
//!   §5.2.4), with runs of `/` merged, or both in either order. `//payments`,
//!   `/x/../payments`, `/x/%2E%2E/payments`, `/x%2F..%2Fpayments` and
//!   `/%70ayments` all match a `/payments` policy; so does every reading with
//!   `\` (raw or `%5C`) read as `/`, as IIS and ASP.NET on Windows route.
//!
//! The query is split into `name=value` pairs on `&` and the first `=`, each side
//! percent-normalized as above; `+` stays a literal `+` (form encoding is not
//! guessed), `a` and `a=` are the same pair, and an empty query (`/p?`) has no
//! pairs; empty pieces (`a=1&&b=2`) are no pairs either, as every query parser
//! skips them (while `=` is a pair with an empty name). The pairs are then sorted by name only, stably, so repeated names keep
//! their relative order (frameworks read the first, the last, or all of them in
//! order). Names are compared as the most lenient framework reads them —
//! percent-decoded, `+` as a space, ASCII case folded — so no framework can see
//! two of its parameters swapped. A pair containing `;` never moves: some
//! frameworks split parameters on `;` too, and could see a reordering inside it.

/// The identity form of a target: its path and its sorted query pairs.
pub(crate) fn normalize(path_and_query: &str) -> (String, Vec<(String, String)>) {
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, query),
        None => (path_and_query, ""),
    };
    (normalize_percent(path), sorted_query(query))
}

/// The readings of a path policies match on (F0), from an identity-normalized
/// path: the path itself and every form an upstream could route it by — with
/// every `%XX` decoded or not, dot segments removed and `/` runs merged, in
/// either order (a server that merges first reads `/a//../b` as `/b`, one that
/// resolves first as `/a/b`). Usually all of them are the same one path.
pub(crate) fn match_paths(normalized_path: &str) -> Vec<String> {
    let mut out = vec![normalized_path.to_owned()];
    if !normalized_path.contains(['%', '.', '\\']) && !normalized_path.contains("//") {
        return out;
    }
    let decoded = String::from_utf8_lossy(&percent_decode(normalized_path.as_bytes())).into_owned();
    let mut bases = vec![normalized_path.to_owned(), decoded];
    // IIS and ASP.NET on Windows read `\` as `/`.
    let backslashed: Vec<String> = bases
        .iter()
        .filter(|base| base.contains('\\'))
        .map(|base| base.replace('\\', "/"))
        .collect();
    bases.extend(backslashed);
    for base in bases {
        let resolved = remove_dot_segments(&base);
        let merged = merge_slashes(&base);
        let candidates = [
            merge_slashes(&resolved),
            remove_dot_segments(&merged),
            resolved,
            merged,
            base,
        ];
        for candidate in candidates {
            if !out.contains(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// Every run of `/` as one `/`.
fn merge_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

fn sorted_query(query: &str) -> Vec<(String, String)> {
    if query.is_empty() {
        return Vec::new();
    }
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (normalize_percent(name), normalize_percent(value))
        })
        .collect();
    // Sort each run between pairs holding a `;`, which stay where they are.
    for run in pairs.split_mut(|(name, value)| name.contains(';') || value.contains(';')) {
        run.sort_by_cached_key(|(name, _)| lenient_name(name));
    }
    pairs
}

/// A parameter name as the most lenient framework compares it.
fn lenient_name(name: &str) -> Vec<u8> {
    let mut decoded = percent_decode(name.as_bytes());
    for b in &mut decoded {
        *b = if *b == b'+' {
            b' '
        } else {
            b.to_ascii_lowercase()
        };
    }
    decoded
}

/// Decodes every valid `%XX` once; anything else stays as it is.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match escape_at(bytes, i) {
            Some((high, low)) => {
                out.push(high << 4 | low);
                i += 3;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The two hex digits of a `%XX` escape starting at `i`, if there is one.
fn escape_at(bytes: &[u8], i: usize) -> Option<(u8, u8)> {
    if bytes.get(i) != Some(&b'%') {
        return None;
    }
    Some((
        hex_value(*bytes.get(i + 1)?)?,
        hex_value(*bytes.get(i + 2)?)?,
    ))
}

/// RFC 3986 §6.2.2.1–2: decode unreserved octets, uppercase the hex of the rest.
fn normalize_percent(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match escape_at(bytes, i) {
            Some((high, low)) => {
                let octet = high << 4 | low;
                if is_unreserved(octet) {
                    out.push(octet);
                } else {
                    out.extend_from_slice(&[b'%', hex_upper(high), hex_upper(low)]);
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

/// The uppercase hex digit of a nibble (`0..=15`).
fn hex_upper(nibble: u8) -> u8 {
    match nibble {
        0..=9 => b'0' + nibble,
        _ => b'A' + (nibble & 0x0f).saturating_sub(10),
    }
}

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

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

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
    fn identity_keeps_dot_and_empty_segments() {
        assert_eq!(normalize("/a//b/").0, "/a//b/");
        assert_eq!(normalize("/x/../payments").0, "/x/../payments");
        assert_eq!(normalize("/x/%2E%2e/payments").0, "/x/../payments");
        assert_eq!(normalize("/./a").0, "/./a");
    }

    #[test]
    fn percent_encoding_is_normalized_not_decoded() {
        assert_eq!(normalize_percent("%7e%41%2d%5F%2E"), "~A-_.");
        assert_eq!(normalize_percent("%2f%3a%c3%a9"), "%2F%3A%C3%A9");
        assert_eq!(normalize_percent("%zz%4%"), "%25zz%254%25");
        assert_eq!(normalize_percent("a+b é"), "a+b é");
    }

    #[test]
    fn a_lone_percent_cannot_pair_with_decoded_octets() {
        // `%30` decodes to `0`; a bare `%` before it must not form `%0A` with it.
        assert_eq!(normalize_percent("%%30A"), "%250A");
        assert_ne!(normalize("/%%30A").0, normalize("/%0A").0);
        let once = normalize_percent("%%30a");
        assert_eq!(normalize_percent(&once), once);
    }

    #[test]
    fn policies_see_every_reading_of_the_path() {
        for target in [
            "/payments",
            "//payments",
            "/x/../payments",
            "/x/%2E%2E/payments",
            "/%70ayments",
            "/./payments",
            "/x%2F..%2Fpayments",
            "///x//..//payments",
        ] {
            let readings = match_paths(&normalize(target).0);
            assert!(
                readings.iter().any(|p| p == "/payments"),
                "{target}: {readings:?}"
            );
        }
        // Merging first or resolving first: both readings are there.
        let readings = match_paths("/a//../b");
        assert!(readings.contains(&"/b".to_owned()), "{readings:?}");
        assert!(readings.contains(&"/a/b".to_owned()), "{readings:?}");
        // An encoded slash is also read as it is, by servers that do not decode it.
        let readings = match_paths("/x%2F..%2Fp");
        assert!(readings.contains(&"/x%2F..%2Fp".to_owned()), "{readings:?}");
        // A backslash, raw or encoded, is also read as a slash.
        for target in ["/x\\..\\payments", "/x%5C..%5Cpayments", "\\payments"] {
            let readings = match_paths(&normalize(target).0);
            assert!(
                readings.iter().any(|p| p == "/payments"),
                "{target}: {readings:?}"
            );
        }
        assert_eq!(match_paths("/a/b/"), vec!["/a/b/".to_owned()]);
        assert_eq!(match_paths(""), vec![String::new()]);
    }

    #[test]
    fn query_pairs_are_split_normalized_and_sorted_by_name_only() {
        let (path, query) = normalize("/p?b=2&a=%7e&a=1&c&d=x=y&e%3D=+");
        assert_eq!(path, "/p");
        let expected = pairs(&[
            ("a", "~"),
            ("a", "1"),
            ("b", "2"),
            ("c", ""),
            ("d", "x=y"),
            ("e%3D", "+"),
        ]);
        assert_eq!(query, expected);
    }

    #[test]
    fn repeated_names_keep_their_relative_order() {
        assert_eq!(
            normalize("/p?to=ann&to=bob").1,
            pairs(&[("to", "ann"), ("to", "bob")])
        );
        assert_ne!(normalize("/p?to=ann&to=bob"), normalize("/p?to=bob&to=ann"));
        assert_eq!(
            normalize("/p?to=ann&x=1&to=bob"),
            normalize("/p?x=1&to=ann&to=bob")
        );
    }

    #[test]
    fn names_a_framework_reads_alike_keep_their_order() {
        // `a+b`, `a%20b`, `A+B` are one name to a form decoder that folds case.
        assert_ne!(normalize("/p?a+b=1&a%20b=2"), normalize("/p?a%20b=2&a+b=1"));
        assert_ne!(normalize("/p?A=1&a=2"), normalize("/p?a=2&A=1"));
        assert_ne!(normalize("/p?%61=1&a=2"), normalize("/p?a=2&%61=1"));
    }

    #[test]
    fn a_pair_with_a_semicolon_never_moves() {
        assert_ne!(normalize("/p?b=1;a=2&a=3"), normalize("/p?a=3&b=1;a=2"));
        assert_eq!(
            normalize("/p?b=1&a=2&x;y&d=1&c=2").1,
            pairs(&[("a", "2"), ("b", "1"), ("x;y", ""), ("c", "2"), ("d", "1")])
        );
    }

    #[test]
    fn an_empty_query_is_no_query() {
        assert_eq!(normalize("/p?"), normalize("/p"));
        assert_eq!(normalize("/p?").1, Vec::new());
        assert_eq!(normalize("/p?&&").1, Vec::new());
        assert_eq!(normalize("/p?=").1, pairs(&[("", "")]));
        assert_ne!(normalize("/p?="), normalize("/p?&"));
    }
}
