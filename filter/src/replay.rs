//! F8: which response headers are recorded and replayed.
//!
//! A header is kept only if it is on the policy's allowlist *and* not on the
//! never-store list. The never-store list wins over any configuration: a
//! recorded `set-cookie` or token would hand one caller's credentials to every
//! retry, and hop-by-hop or length headers describe one connection, not the
//! response (Envoy recomputes `content-length` for a local reply).
//! The same filter runs when recording and again when replaying, so a record
//! written under a looser policy never leaks through a stricter one.

use std::collections::BTreeSet;

/// The default allowlist (F8).
pub const DEFAULT_REPLAY_HEADERS: [&str; 6] = [
    "content-type",
    "content-disposition",
    "content-language",
    "cache-control",
    "etag",
    "location",
];

/// Header marking a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

const NEVER_STORED: &[&str] = &[
    "set-cookie",
    "set-cookie2",
    "authorization",
    "proxy-authorization",
    "proxy-authenticate",
    "www-authenticate",
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

/// Whether a (lowercase) header name may never be recorded or replayed.
pub fn never_stored(name: &str) -> bool {
    name.starts_with(':') || name.ends_with("-token") || NEVER_STORED.contains(&name)
}

/// The headers of `headers` to record or replay: allowlisted, never-store
/// names removed, values that are not UTF-8 dropped. Names come out lowercase,
/// in their original order.
pub fn keep_headers<'a, I>(headers: I, allowlist: &BTreeSet<String>) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    headers
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.to_ascii_lowercase();
            if never_stored(&name) || !allowlist.contains(&name) {
                return None;
            }
            let value = std::str::from_utf8(value).ok()?;
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
            "authorization",
            "proxy-authenticate",
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
    fn drops_values_that_are_not_utf8() {
        let headers: Vec<(&str, &[u8])> = vec![("content-type", &[0xff, 0xfe])];
        assert!(keep_headers(headers, &allow(&[])).is_empty());
    }
}
