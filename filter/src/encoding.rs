//! F8: a replay must decode for the client that asks again.
//!
//! A recorded answer is replayed to whoever retries, and that client may not
//! accept the coding the first one did: replaying a gzip body to `curl`
//! without `--compressed` hands it bytes it cannot read. keyflight therefore
//! records identity-encoded answers: a guarded request goes upstream with
//! `accept-encoding: identity` (set by the machine), so the upstream has no
//! reason to encode, and compressing for clients is left to Envoy's
//! compressor filter, placed before keyflight in the chain, which encodes each
//! answer and each replay for its own client. An upstream that encodes anyway
//! has its `content-encoding` recorded with the body, and a replay goes only to
//! a client that accepts that coding; any other gets 409
//! `response_not_replayable` instead of bytes it cannot decode.
//!
//! Acceptance follows RFC 9110 §12.5.3 with one deliberate difference: a
//! request without `accept-encoding` accepts only `identity` (the RFC lets a
//! server send any coding then, but clients that send none usually decode
//! none).

/// The request header keyflight sets on a guarded request it forwards.
pub const ACCEPT_ENCODING: &str = "accept-encoding";

/// What every forwarded guarded request asks the upstream for.
pub const IDENTITY: &str = "identity";

/// The codings a client accepts, from its `accept-encoding` values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// `(coding, acceptable)` as listed, lower-case; `q=0` is not acceptable.
    codings: Vec<(String, bool)>,
}

impl Accepted {
    /// Parses every `accept-encoding` value of a request (none: identity only).
    pub fn from_values(values: &[&[u8]]) -> Accepted {
        let mut codings = Vec::new();
        for value in values {
            let Ok(text) = std::str::from_utf8(value) else {
                continue;
            };
            for item in text.split(',') {
                let mut parts = item.split(';');
                let coding = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
                if coding.is_empty() {
                    continue;
                }
                let refused = parts.any(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .or_else(|| p.trim().strip_prefix("Q="))
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                codings.push((coding, !refused));
            }
        }
        Accepted { codings }
    }

    /// Whether a body with this `content-encoding` (codings in the order they
    /// were applied, `None` for none) decodes for this client.
    pub fn decodes(&self, content_encoding: Option<&str>) -> bool {
        let Some(applied) = content_encoding else {
            return true;
        };
        applied
            .split(',')
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != IDENTITY)
            .all(|coding| self.accepts(&coding))
    }

    fn accepts(&self, coding: &str) -> bool {
        let listed = |name: &str| {
            self.codings
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, ok)| *ok)
        };
        // `x-gzip` is `gzip` (RFC 9110 §8.4.1.3).
        let alias = match coding {
            "x-gzip" => Some("gzip"),
            "gzip" => Some("x-gzip"),
            _ => None,
        };
        listed(coding)
            .or_else(|| alias.and_then(listed))
            .or_else(|| listed("*"))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(values: &[&str]) -> Accepted {
        let bytes: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
        Accepted::from_values(&bytes)
    }

    #[test]
    fn an_unencoded_answer_decodes_for_everyone() {
        assert!(accepted(&[]).decodes(None));
        assert!(accepted(&["br;q=0"]).decodes(None));
        assert!(accepted(&[]).decodes(Some("identity")));
    }

    #[test]
    fn an_encoded_answer_needs_a_client_that_accepts_it() {
        assert!(!accepted(&[]).decodes(Some("gzip")));
        assert!(accepted(&["gzip, deflate, br"]).decodes(Some("gzip")));
        assert!(accepted(&["GZIP;q=0.5"]).decodes(Some("gzip")));
        assert!(accepted(&["x-gzip"]).decodes(Some("gzip")));
        assert!(!accepted(&["gzip;q=0"]).decodes(Some("gzip")));
        assert!(!accepted(&["br"]).decodes(Some("gzip")));
        assert!(accepted(&["*"]).decodes(Some("gzip")));
        assert!(!accepted(&["*, gzip;q=0"]).decodes(Some("gzip")));
        assert!(accepted(&["deflate", "gzip"]).decodes(Some("deflate, gzip")));
        assert!(!accepted(&["gzip"]).decodes(Some("deflate, gzip")));
    }
}
