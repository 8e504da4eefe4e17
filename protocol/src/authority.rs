//! The request's authority (`:authority`, the `Host`), as the scope hashes it
//! and policies match it (K3, F0).
//!
//! Host names are case-insensitive and a fully qualified name may end in a
//! dot (RFC 9110 §4.2.3, RFC 1034 §3.1), and a port equal to the scheme's
//! default is the same server as no port (RFC 3986 §6.2.3). So the normal form
//! is: ASCII lower-cased; the host's trailing dot removed (all of them, so
//! normalizing is idempotent); a port written
//! as a plain decimal (`:0443` is `:443`), and dropped when it is empty or the
//! default of the request's scheme — `:80` under `http`, `:443` under `https`.
//! Only the request's own `:scheme` decides: `h:80` over TLS is another port,
//! not the default one, so it keeps its port. With no known scheme, no port is
//! a default and every port is kept.
//!
//! An authority that does not parse as `host[:port]` (a non-numeric port, say)
//! is kept whole, lower-cased, as its own host: it is never equal to a
//! well-formed one.

/// A normalized authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    host: String,
    /// The explicit port, unless it is the scheme's default.
    port: Option<u16>,
    /// The port the request reaches: explicit, or the scheme's default.
    effective_port: Option<u16>,
}

impl Authority {
    /// Normalizes `authority` as received under `scheme` (`http`, `https`, …).
    pub fn new(authority: &str, scheme: Option<&str>) -> Authority {
        let lowered = authority.to_ascii_lowercase();
        let default_port = scheme.and_then(default_port);
        let (host, port) = match split_port(&lowered) {
            Some((host, port)) => (host, port),
            None => {
                return Authority {
                    host: lowered,
                    port: None,
                    effective_port: None,
                };
            }
        };
        let host = host.trim_end_matches('.').to_owned();
        let effective_port = port.or(default_port);
        Authority {
            host,
            port: port.filter(|p| Some(*p) != default_port),
            effective_port,
        }
    }

    /// The host, lower-cased, without trailing dots.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port the request is addressed to, when known (explicit, or the
    /// default of its scheme).
    pub fn effective_port(&self) -> Option<u16> {
        self.effective_port
    }

    /// The normal form hashed into the scope: `host` or `host:port`.
    pub fn normalized(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.clone(),
        }
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

/// Splits `host[:port]`; `None` when the port is not decimal digits, the
/// brackets of an IPv6 literal do not close, or an unbracketed host holds a
/// colon. An empty port is no port.
fn split_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let host_end = if authority.starts_with('[') {
        authority.find(']')? + 1
    } else {
        authority.rfind(':').unwrap_or(authority.len())
    };
    let (host, rest) = authority.split_at(host_end);
    if !host.starts_with('[') && host.contains(':') {
        return None;
    }
    let port = match rest.strip_prefix(':') {
        None if rest.is_empty() => return Some((host, None)),
        None => return None,
        Some("") => None,
        Some(digits) if digits.bytes().all(|b| b.is_ascii_digit()) => {
            let trimmed = digits.trim_start_matches('0');
            Some(if trimmed.is_empty() {
                0
            } else {
                trimmed.parse().ok()?
            })
        }
        Some(_) => return None,
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn norm(authority: &str, scheme: Option<&str>) -> String {
        Authority::new(authority, scheme).normalized()
    }

    #[test]
    fn case_trailing_dot_and_default_port_are_one_authority() {
        for spelling in [
            "api.example",
            "API.Example",
            "api.example.",
            "api.example:443",
            "api.example.:0443",
            "api.example:",
        ] {
            assert_eq!(norm(spelling, Some("https")), "api.example", "{spelling}");
        }
        assert_eq!(norm("api.example:80", Some("http")), "api.example");
        assert_eq!(norm("api.example:80", Some("HTTP")), "api.example");
    }

    #[test]
    fn only_the_schemes_own_default_port_is_dropped() {
        assert_eq!(norm("h:80", Some("https")), "h:80");
        assert_eq!(norm("h:443", Some("http")), "h:443");
        assert_eq!(norm("h:443", None), "h:443");
        assert_eq!(norm("h:8443", Some("https")), "h:8443");
    }

    #[test]
    fn effective_port_comes_from_the_port_or_the_scheme() {
        assert_eq!(
            Authority::new("h", Some("https")).effective_port(),
            Some(443)
        );
        assert_eq!(
            Authority::new("h:443", Some("https")).effective_port(),
            Some(443)
        );
        assert_eq!(
            Authority::new("h:9", Some("https")).effective_port(),
            Some(9)
        );
        assert_eq!(Authority::new("h", None).effective_port(), None);
    }

    #[test]
    fn ipv6_literals_keep_their_colons() {
        assert_eq!(norm("[::1]:443", Some("https")), "[::1]");
        assert_eq!(norm("[::1]:8080", Some("https")), "[::1]:8080");
        assert_eq!(Authority::new("[::1]", Some("http")).host(), "[::1]");
    }

    #[test]
    fn malformed_authorities_stay_whole() {
        assert_eq!(norm("h:x", Some("https")), "h:x");
        assert_eq!(norm("[::1", Some("https")), "[::1");
        assert_eq!(norm("h:99999", Some("https")), "h:99999");
        assert_eq!(norm("::1:443", Some("https")), "::1:443");
        assert_ne!(norm("h:x", Some("https")), norm("h", Some("https")));
    }
}
