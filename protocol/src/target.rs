//! The request target — method, path, query and authority — normalized once,
//! for the scope, the fingerprint and policy matching alike (K3, K4, F0).
//!
//! How each part is normalized is documented where it is done: the path and
//! query in the `uri` module, the authority in [`crate::authority`]. The
//! method is kept as sent (methods are case-sensitive, RFC 9110 §9.1).

use crate::authority::Authority;
use crate::uri;

/// A normalized request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The method as sent.
    pub method: String,
    /// The path, percent-encoding normalized (dot and empty segments kept).
    pub path: String,
    /// Query pairs, percent-encoding normalized, sorted by name (stable).
    pub query: Vec<(String, String)>,
    /// The authority, normalized under the request's scheme.
    pub authority: Authority,
}

impl Target {
    /// Normalizes a request's pseudo-header values.
    pub fn new(
        method: &str,
        path_and_query: &str,
        authority: &str,
        scheme: Option<&str>,
    ) -> Target {
        let (path, query) = uri::normalize(path_and_query);
        Target {
            method: method.to_owned(),
            path,
            query,
            authority: Authority::new(authority, scheme),
        }
    }

    /// The target of a request given as its full header list (lowercase
    /// names, pseudo-headers included): `None` when `:method`, `:path` or
    /// `:authority` is missing or not UTF-8. A repeated pseudo-header cannot
    /// reach a filter (HTTP/2 and HTTP/3 forbid it; Envoy builds them once
    /// for HTTP/1), so the first value is the only one.
    pub fn from_headers(headers: &[(String, Vec<u8>)]) -> Option<Target> {
        let text = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| std::str::from_utf8(v).ok())
        };
        Some(Target::new(
            text(":method")?,
            text(":path")?,
            text(":authority")?,
            text(":scheme"),
        ))
    }

    /// Every reading of the path a policy may match (F0): see the `uri` module.
    pub fn match_paths(&self) -> Vec<String> {
        uri::match_paths(&self.path)
    }
}
