//! F8: which response headers are recorded and replayed.
//!
//! A header is kept only if it is on the policy's allowlist *and* passes the
//! recorded-header rule of [`keyflight_protocol::headers`]: its name is an
//! RFC 9110 token that is not on the never-stored list (credentials, cookies,
//! hop-by-hop and length headers — the list wins over any configuration),
//! and its value is a UTF-8 field-value without control characters. The
//! lease-store refuses a finalize that breaks the same rule, so dropping here
//! is what keeps a finalize from being refused.
//! The same filter runs when recording and again when replaying, so a record
//! written under a looser policy never leaks through a stricter one, and a
//! record that holds a header the rule refuses (written by an older store, or
//! edited by hand) is replayed without that header rather than smuggling it
//! into the reply.

use std::collections::BTreeSet;

use keyflight_protocol::headers;
pub use keyflight_protocol::headers::{REPLAYED_HEADER, never_stored};

/// The default allowlist (F8).
pub const DEFAULT_REPLAY_HEADERS: [&str; 6] = [
    "content-type",
    "content-disposition",
    "content-language",
    "cache-control",
    "etag",
    "location",
];

/// The headers of `headers` to record or replay: allowlisted, and passing
/// the recorded-header rule (values that are not UTF-8 are dropped too).
/// Names come out lowercase, in their original order.
pub fn keep_headers<'a, I>(headers: I, allowlist: &BTreeSet<String>) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    headers
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.to_ascii_lowercase();
            if !allowlist.contains(&name) {
                return None;
            }
            let value = std::str::from_utf8(value).ok()?;
            headers::check(&name, value).ok()?;
            Some((name, value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(extra: &[&str]) -> BTreeSet<String> {
        DEFAULT_REPLAY_HEADERS
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    }

    #[test]
    fn keeps_allowlisted_headers_in_order_and_lowercase() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("Content-Type", b"application/json"),
            ("x-other", b"no"),
            ("ETag", b"\"v1\""),
            ("x-signature", b"sig"),
        ];
        assert_eq!(
            keep_headers(headers, &allow(&["x-signature"])),
            vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("etag".to_owned(), "\"v1\"".to_owned()),
                ("x-signature".to_owned(), "sig".to_owned()),
            ]
        );
    }

    #[test]
    fn never_stores_credentials_hop_by_hop_or_length_whatever_the_allowlist() {
        let dangerous = [
            "set-cookie",
            "cookie",
            "authorization",
            "authentication-info",
            "proxy-authentication-info",
            "proxy-authenticate",
            "x-client-secret",
            "x-api-key",
            "x-csrf-token",
            "x-access-token",
            "transfer-encoding",
            "connection",
            "content-length",
            ":status",
            "idempotent-replayed",
        ];
        let headers: Vec<(&str, &[u8])> = dangerous.iter().map(|h| (*h, &b"v"[..])).collect();
        assert!(keep_headers(headers, &allow(&dangerous)).is_empty());
    }

    #[test]
    fn drops_values_that_are_not_field_values_even_when_allowlisted() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("location", b"/a\r\nset-cookie: s=1"),
            ("etag", b"\"v1\"\0"),
            ("content-language", b"en\x7f"),
            ("cache-control", b" no-store"),
            ("content-type", b"application/json"),
        ];
        assert_eq!(
            keep_headers(headers, &allow(&[])),
            vec![("content-type".to_owned(), "application/json".to_owned())]
        );
    }

    #[test]
    fn drops_names_that_are_not_tokens_even_when_allowlisted() {
        let headers: Vec<(&str, &[u8])> = vec![("x bad", b"v"), ("x-good", b"v")];
        assert_eq!(
            keep_headers(headers, &allow(&["x bad", "x-good"])),
            vec![("x-good".to_owned(), "v".to_owned())]
        );
    }

    #[test]
    fn drops_values_that_are_not_utf8() {
        let headers: Vec<(&str, &[u8])> = vec![("content-type", &[0xff, 0xfe])];
        assert!(keep_headers(headers, &allow(&[])).is_empty());
    }
}
