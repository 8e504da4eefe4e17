//! A request's identity from its raw parts: the one code path that turns
//! what arrived (the header list with its pseudo-headers, the body, the
//! principal) into the scope (K3) and the fingerprint (K4).
//!
//! The edge filter and `keyflight fingerprint` both call exactly these two
//! steps, so an operator's "why was this a 409?" is answered by the code that
//! made the decision:
//!
//! 1. [`RequestHead::read`] takes the normalized [`Target`] and the full
//!    header list: it validates the key (K1; repeated → invalid), normalizes
//!    the `content-type`, and collects the policy's fingerprint headers. A
//!    header sent on several lines is taken as its values joined with `,`,
//!    each trimmed first — exactly what Envoy 1.40 hands a filter for the
//!    headers it coalesces itself (`if-match`, `content-type` and the other
//!    headers its codec keeps inline; checked), so a filter behind Envoy and
//!    a description given line by line agree. The filter runs this step as
//!    soon as the headers are in, so a bad key is refused before any body is
//!    buffered.
//! 2. [`RequestHead::identify`] takes the principal, the scope mode and the
//!    body and computes both digests. The filter calls its twin
//!    [`RequestHead::identify_digested`] with the body's
//!    [`fingerprint::body_digest`], which it may have remembered from the same
//!    bytes (`docs/stream-machine.md#the-body-digest-memo`): both frame the
//!    same fields with the same code.

use crate::IdempotencyKey;
use crate::digest::Digest;
use crate::fingerprint::{self, BodyDigest, Explanation, FingerprintInput};
use crate::headers::values;
use crate::key::{self, KeyError};
use crate::media_type::{MediaType, trim_ows};
use crate::principal::Principal;
use crate::scope::{self, ScopeInput, ScopeMode};
use crate::target::Target;

/// What a policy decides about a request's identity.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// The key header's name (lowercase).
    pub key_header: &'a str,
    /// Headers that enter the fingerprint (lowercase names).
    pub fingerprint_headers: &'a [String],
}

/// Everything of a request's head that its identity depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The normalized target.
    pub target: Target,
    /// The key, `None` when the request has none.
    pub key: Option<IdempotencyKey>,
    /// The normalized `content-type`.
    pub media_type: MediaType,
    /// The fingerprint headers with their combined values, `None` when absent.
    pub selected: Vec<(String, Option<Vec<u8>>)>,
}

/// A request's scope and fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identified {
    /// The scope, when the request carries a key.
    pub scope: Option<Digest>,
    /// The fingerprint and every step that led to it.
    pub explanation: Explanation,
}

impl RequestHead {
    /// Step 1: reads the head of a request whose target is `target` and whose
    /// full header list (lowercase names, repeats kept) is `headers`.
    pub fn read(
        target: Target,
        headers: &[(String, Vec<u8>)],
        rules: &Rules<'_>,
    ) -> Result<RequestHead, KeyError> {
        let key_values: Vec<&[u8]> = values(headers, rules.key_header).collect();
        let key = key::parse_key(&key_values)?;
        let content_types: Vec<&[u8]> = values(headers, "content-type").collect();
        let selected = rules
            .fingerprint_headers
            .iter()
            .map(|name| {
                let joined: Vec<&[u8]> = values(headers, name).map(trim_ows).collect();
                let value = (!joined.is_empty()).then(|| joined.join(&b","[..]));
                (name.clone(), value)
            })
            .collect();
        Ok(RequestHead {
            target,
            key,
            media_type: MediaType::from_values(&content_types),
            selected,
        })
    }

    /// Step 2: the scope (if there is a key) and the fingerprint.
    pub fn identify(&self, principal: Principal<'_>, mode: ScopeMode, body: &[u8]) -> Identified {
        let selected = self.selected();
        let explanation = fingerprint::explain(&self.fingerprint_input(body, &selected));
        Identified {
            scope: self.scope(principal, mode),
            explanation,
        }
    }

    /// Step 2 with the body already digested ([`fingerprint::body_digest`] of
    /// this head's media type and the body): the scope and the fingerprint
    /// [`RequestHead::identify`] computes, without the body's bytes.
    pub fn identify_digested(
        &self,
        principal: Principal<'_>,
        mode: ScopeMode,
        body: BodyDigest,
    ) -> (Option<Digest>, Digest) {
        let selected = self.selected();
        let input = self.fingerprint_input(&[], &selected);
        let fingerprint = fingerprint::fingerprint_digested(&input, body);
        (self.scope(principal, mode), fingerprint)
    }

    /// The scope, when the request carries a key.
    fn scope(&self, principal: Principal<'_>, mode: ScopeMode) -> Option<Digest> {
        self.key.as_ref().map(|key| {
            scope::scope(&ScopeInput {
                principal,
                target: &self.target,
                key,
                mode,
            })
        })
    }

    fn selected(&self) -> Vec<(&str, Option<&[u8]>)> {
        self.selected
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_deref()))
            .collect()
    }

    fn fingerprint_input<'a>(
        &'a self,
        body: &'a [u8],
        selected: &'a [(&'a str, Option<&'a [u8]>)],
    ) -> FingerprintInput<'a> {
        FingerprintInput {
            target: &self.target,
            media_type: &self.media_type,
            body,
            selected_headers: selected,
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::principal::PrincipalSource;

    fn h(name: &str, value: &str) -> (String, Vec<u8>) {
        (name.to_owned(), value.as_bytes().to_vec())
    }

    fn head(headers: &[(String, Vec<u8>)]) -> RequestHead {
        let target = Target::from_headers(headers).expect("pseudo-headers");
        let names = ["if-match".to_owned()];
        let rules = Rules {
            key_header: "idempotency-key",
            fingerprint_headers: &names,
        };
        RequestHead::read(target, headers, &rules).expect("valid key")
    }

    fn base() -> Vec<(String, Vec<u8>)> {
        vec![
            h(":method", "POST"),
            h(":path", "/pay?b=1&a=2"),
            h(":authority", "api.example"),
            h(":scheme", "https"),
            h("idempotency-key", "k"),
            h("content-type", "application/json"),
        ]
    }

    fn digests(headers: &[(String, Vec<u8>)]) -> (Option<Digest>, Digest) {
        let source = PrincipalSource::Header("x-user".into());
        let principal = Principal::Named {
            source: &source,
            name: "alice",
        };
        let id = head(headers).identify(principal, ScopeMode::Route, br#"{"a":1}"#);
        (id.scope, id.explanation.fingerprint)
    }

    #[test]
    fn respellings_of_the_head_are_one_identity() {
        let reference = digests(&base());
        let mut respelled = base();
        respelled[1] = h(":path", "/p%61y?a=2&b=1");
        respelled[2] = h(":authority", "API.example.:443");
        respelled[5] = h("content-type", "Application/JSON; charset=\"UTF-8\"");
        assert_eq!(digests(&respelled), reference);
    }

    #[test]
    fn repeated_fingerprint_headers_are_joined_as_envoy_joins_them() {
        // What Envoy delivers for two if-match lines: one value, joined with ",".
        let mut once = base();
        once.push(h("if-match", "\"a\",\"b\""));
        let mut twice = base();
        twice.push(h("if-match", " \"a\" "));
        twice.push(h("if-match", "\"b\""));
        assert_eq!(digests(&once), digests(&twice));
        assert_ne!(digests(&once).1, digests(&base()).1);
    }

    #[test]
    fn a_repeated_key_is_invalid() {
        let mut headers = base();
        headers.push(h("idempotency-key", "k"));
        let target = Target::from_headers(&headers).expect("pseudo-headers");
        let rules = Rules {
            key_header: "idempotency-key",
            fingerprint_headers: &[],
        };
        assert!(RequestHead::read(target, &headers, &rules).is_err());
    }

    #[test]
    fn no_key_no_scope() {
        let mut headers = base();
        headers.retain(|(n, _)| n != "idempotency-key");
        let id = head(&headers).identify(Principal::AnonymousShared, ScopeMode::Route, b"");
        assert_eq!(id.scope, None);
    }
}
