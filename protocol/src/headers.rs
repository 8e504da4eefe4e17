//! F8: the one rule for a response header that is recorded and replayed.
//!
//! A recorded header is written by one proxy, kept by the lease-store and
//! sent again by any proxy to every caller that retries with the key. So a
//! header that could change the meaning of the replayed message, or hand one
//! caller's credentials to another, must never get that far. The filter
//! applies [`check`] before it records and again before it replays; the
//! lease-store applies [`check_all`] to every finalize and operator resolve
//! and refuses (400) what breaks it. One function on both sides means a
//! record the store accepted is a record the filter will send, and a record
//! that slipped in some other way (an older store, a hand-edited row) is
//! still dropped at the edge.
//!
//! The rule:
//!
//! - **The name is an RFC 9110 token** (§5.1: `1*tchar`). Anything else —
//!   a space, a colon, a CR or LF — would let a value end the header block
//!   early or start a header of its own (response splitting). Pseudo-headers
//!   (`:status`) are not tokens either, so they are refused as well.
//! - **The value is an RFC 9110 field-value** (§5.5): visible ASCII, spaces,
//!   horizontal tabs between visible characters, and bytes ≥ 0x80 (UTF-8
//!   here, since the wire format carries strings); no CR, LF, NUL, DEL or any
//!   other control character, and no leading or trailing whitespace. An empty
//!   value is a field-value.
//! - **The name is not one that is never stored** ([`never_stored`]),
//!   compared case-insensitively: credentials and cookies (a replay would
//!   set one caller's cookie, or show its challenge, to every retrier), any
//!   name that contains `token` or `secret` or ends in `-key` (custom
//!   credential headers), hop-by-hop and framing headers (they describe one
//!   connection, and a proxy recomputes `content-length` for its own reply),
//!   and the replay marker itself.

/// Header marking a replayed response (F8); a proxy adds it, never a record.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Names that are never recorded or replayed, whatever a policy allows.
const NEVER_STORED: &[&str] = &[
    // Credentials, cookies and authentication exchanges.
    "set-cookie",
    "set-cookie2",
    "cookie",
    "authorization",
    "proxy-authorization",
    "proxy-authenticate",
    "www-authenticate",
    "authentication-info",
    "proxy-authentication-info",
    // Hop-by-hop and framing: they describe one connection, not the response.
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    REPLAYED_HEADER,
];

/// Why a header may not be recorded or replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderProblem {
    /// The name is empty or holds a character outside RFC 9110's `tchar`.
    #[error("the name is not an RFC 9110 token")]
    NameNotToken,
    /// The value holds a control character or surrounding whitespace.
    #[error(
        "the value is not an RFC 9110 field-value (control character or surrounding whitespace)"
    )]
    ValueNotFieldValue,
    /// The name is on the never-stored list.
    #[error("this header is never stored or replayed (credentials, cookies, hop-by-hop)")]
    NeverStored,
}

/// A header of a recorded response that breaks the rule, by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("headers[{index}]: {problem}")]
pub struct BadHeader {
    /// Zero-based position in the recorded header list.
    pub index: usize,
    /// What is wrong with it.
    pub problem: HeaderProblem,
}

/// Whether `name` (any case) is never recorded or replayed.
pub fn never_stored(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("token")
        || name.contains("secret")
        || name.ends_with("-key")
        || NEVER_STORED.contains(&name.as_str())
}

/// RFC 9110 §5.6.2: `token = 1*tchar`.
pub fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(is_tchar)
}

/// RFC 9110 §5.5: `field-value = *field-content`, where field-content starts
/// and ends with a visible character (VCHAR or obs-text) and may hold SP and
/// HTAB in between.
pub fn is_field_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let is_whitespace = |b: &u8| matches!(b, b' ' | b'\t');
    if bytes.first().is_some_and(is_whitespace) || bytes.last().is_some_and(is_whitespace) {
        return false;
    }
    bytes
        .iter()
        .all(|&b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b) || b >= 0x80)
}

/// [`is_token`] as a regular expression (ECMA 262 and Rust `regex` syntax),
/// for documents that describe the rule, such as the lease-store's OpenAPI.
pub const TOKEN_PATTERN: &str = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";

/// [`is_field_value`] as a regular expression: empty, or a visible character
/// (anything but controls and space), optionally followed by visible
/// characters, spaces and tabs ending in a visible character.
pub const FIELD_VALUE_PATTERN: &str =
    r"^(?:[^\x00-\x20\x7f](?:[^\x00-\x08\x0a-\x1f\x7f]*[^\x00-\x20\x7f])?)?$";

/// [`never_stored`] as a regular expression that matches the names it refuses,
/// case-insensitively without inline flags (which ECMA 262 lacks): each letter
/// is a two-case class.
pub fn never_stored_pattern() -> String {
    // The names hold only letters, digits and `-`, none of which needs escaping.
    let any_case = |text: &str| -> String {
        text.chars()
            .map(|c| match c {
                'a'..='z' => format!("[{c}{}]", c.to_ascii_uppercase()),
                other => other.to_string(),
            })
            .collect()
    };
    let exact: Vec<String> = NEVER_STORED.iter().map(|name| any_case(name)).collect();
    format!(
        "^(?:{})$|{}|{}|{}$",
        exact.join("|"),
        any_case("token"),
        any_case("secret"),
        any_case("-key")
    )
}

/// Checks one header against the rule.
pub fn check(name: &str, value: &str) -> Result<(), HeaderProblem> {
    if !is_token(name) {
        return Err(HeaderProblem::NameNotToken);
    }
    if never_stored(name) {
        return Err(HeaderProblem::NeverStored);
    }
    if !is_field_value(value) {
        return Err(HeaderProblem::ValueNotFieldValue);
    }
    Ok(())
}

/// Checks a recorded header list; the first header that breaks the rule.
pub fn check_all(headers: &[(String, String)]) -> Result<(), BadHeader> {
    for (index, (name, value)) in headers.iter().enumerate() {
        check(name, value).map_err(|problem| BadHeader { index, problem })?;
    }
    Ok(())
}

/// RFC 9110 §5.6.2 `tchar`: `!#$%&'*+-.^_`|~`, digits and letters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Every value of header `name` in a header list, in order (names compared
/// ASCII case-insensitively; repeated headers kept as separate values).
pub fn values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_tokens() {
        for good in ["etag", "Content-Type", "x-a.b_c~d", "x!#$%&'*+^`|"] {
            assert!(is_token(good), "{good:?} is a token");
        }
        for bad in [
            "",
            "x y",
            "x:y",
            ":status",
            "x\r\nset-cookie",
            "x\0",
            "é",
            "x\"",
            "x(y)",
            "a/b",
        ] {
            assert!(!is_token(bad), "{bad:?} is not a token");
            assert_eq!(check(bad, "v"), Err(HeaderProblem::NameNotToken));
        }
    }

    #[test]
    fn values_must_be_field_values() {
        for good in ["", "v", "a b", "a\tb", "\"v1\"", "caf\u{e9}", "x=1; y=2"] {
            assert!(is_field_value(good), "{good:?} is a field-value");
        }
        for bad in [
            "a\r\nset-cookie: x",
            "a\nb",
            "a\rb",
            "a\0b",
            "a\u{7f}",
            "a\u{1}",
            "\u{1b}[31m",
            " leading",
            "trailing ",
            "\ttab",
            "tab\t",
        ] {
            assert!(!is_field_value(bad), "{bad:?} is not a field-value");
            assert_eq!(check("etag", bad), Err(HeaderProblem::ValueNotFieldValue));
        }
    }

    #[test]
    fn credentials_cookies_and_connection_headers_are_never_stored_in_any_case() {
        for name in [
            "set-cookie",
            "Set-Cookie",
            "cookie",
            "authorization",
            "proxy-authenticate",
            "WWW-Authenticate",
            "authentication-info",
            "proxy-authentication-info",
            "x-csrf-token",
            "x-token-id",
            "tokens",
            "x-client-secret",
            "secretary",
            "x-api-key",
            "idempotency-key",
            "transfer-encoding",
            "connection",
            "content-length",
            "idempotent-replayed",
        ] {
            assert!(never_stored(name), "{name} is never stored");
            assert_eq!(check(name, "v"), Err(HeaderProblem::NeverStored));
        }
        for name in ["content-type", "etag", "location", "x-keyring", "keys"] {
            assert!(!never_stored(name), "{name} may be stored");
            assert_eq!(check(name, "v"), Ok(()));
        }
    }

    #[test]
    fn the_first_bad_header_is_named_by_index() {
        let headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("etag".to_owned(), "\"v1\"".to_owned()),
            ("location".to_owned(), "/a\r\nx: y".to_owned()),
            ("set-cookie".to_owned(), "s=1".to_owned()),
        ];
        assert_eq!(
            check_all(&headers),
            Err(BadHeader {
                index: 2,
                problem: HeaderProblem::ValueNotFieldValue
            })
        );
        assert_eq!(check_all(&headers[..2]), Ok(()));
        assert_eq!(
            check_all(&headers[3..]).map_err(|e| e.to_string()),
            Err("headers[0]: this header is never stored or replayed (credentials, cookies, hop-by-hop)".to_owned())
        );
    }
}
