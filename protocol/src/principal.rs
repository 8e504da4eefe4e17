//! K2: who a request is for, and where that was read.
//!
//! A principal is a name *and* the source that named it: a JWT `sub` of
//! `spiffe://mesh/ns/a/sa/b` and a workload whose mTLS peer id is that same
//! string are different callers, and so are one identity provider's user `42`
//! and another's. The scope therefore hashes the source as configured (its
//! kind and what it reads: the header name, the property path, the jwt_authn
//! metadata key and claim path) before the name. Changing a source's
//! configuration thus changes the scope of every record it named, like
//! changing a policy's scope mode.
//!
//! A source must name exactly one principal. A value is trimmed of optional
//! whitespace (space, tab); empty is absent; a value that is not printable
//! UTF-8 is refused, never hashed as bytes nobody could name. A header sent
//! more than once is refused too, never its first value: when a client sends
//! `x-user: victim` and an authn filter appends `x-user: attacker`, picking one
//! would let one caller act in another's scope.

use crate::framing::FramedHasher;

/// One place a principal may be read from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PrincipalSource {
    /// A request header (lowercase name) set by an earlier authn filter.
    Header(String),
    /// An Envoy property path, e.g. `["connection", "uri_san_peer_certificate"]`.
    Property(Vec<String>),
    /// A claim of `jwt_authn` dynamic metadata (`payload_in_metadata`).
    JwtClaim {
        /// The `payload_in_metadata` name.
        metadata_key: String,
        /// The claim path, one segment per nested object (`act.sub`).
        claim: Vec<String>,
    },
}

/// Claims registered as JSON objects or arrays: never a principal, so a
/// source whose claim path ends in one is refused when it is configured.
/// (`act`: RFC 8693; `may_act`: RFC 8693; `cnf`: RFC 7800; `aud`, `amr`:
/// RFC 7519 / OIDC arrays; `address`, `_claim_names`, `_claim_sources`: OIDC
/// objects; `authorization_details`: RFC 9396; `events`: RFC 8417; `sub_id`:
/// RFC 9493.)
pub const STRUCTURED_CLAIMS: &[&str] = &[
    "act",
    "may_act",
    "cnf",
    "aud",
    "amr",
    "address",
    "_claim_names",
    "_claim_sources",
    "authorization_details",
    "events",
    "sub_id",
];

/// Why a principal source cannot be configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// An empty claim path or segment.
    #[error("must be a claim name or a dotted path of names (e.g. act.sub)")]
    EmptyClaimSegment,
    /// Not `header:NAME`, `property:A.B` or `jwt_claim:KEY:A.B`.
    #[error(
        "{0:?} is not header:NAME, property:SEGMENT.SEGMENT or jwt_claim:METADATA_KEY:CLAIM.PATH"
    )]
    Description(String),
    /// The claim is registered as an object or an array.
    #[error(
        "the claim {0:?} is a JSON object or array, never a principal; name a string inside it (e.g. act.sub)"
    )]
    StructuredClaim(String),
}

impl PrincipalSource {
    /// A `jwt_authn` claim source from a dotted claim path (`act.sub`).
    pub fn jwt_claim(metadata_key: &str, claim: &str) -> Result<Self, SourceError> {
        let segments: Vec<String> = claim.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(SourceError::EmptyClaimSegment);
        }
        if let Some(last) = segments.last()
            && STRUCTURED_CLAIMS.contains(&last.as_str())
        {
            return Err(SourceError::StructuredClaim(claim.to_owned()));
        }
        Ok(PrincipalSource::JwtClaim {
            metadata_key: metadata_key.to_owned(),
            claim: segments,
        })
    }

    /// How the source is written for people and on `keyflight fingerprint
    /// --principal-source`: `header:x-user`, `property:connection.uri_san_peer_certificate`,
    /// `jwt_claim:jwt_payload:act.sub`.
    pub fn describe(&self) -> String {
        match self {
            PrincipalSource::Header(name) => format!("header:{name}"),
            PrincipalSource::Property(path) => format!("property:{}", path.join(".")),
            PrincipalSource::JwtClaim {
                metadata_key,
                claim,
            } => format!("jwt_claim:{metadata_key}:{}", claim.join(".")),
        }
    }

    /// Reads the form [`describe`](Self::describe) writes.
    pub fn from_description(text: &str) -> Result<Self, SourceError> {
        let invalid = || SourceError::Description(text.to_owned());
        let (kind, rest) = text.split_once(':').ok_or_else(invalid)?;
        match kind {
            "header" if !rest.is_empty() => Ok(PrincipalSource::Header(rest.to_ascii_lowercase())),
            "property" if !rest.split('.').any(str::is_empty) => Ok(PrincipalSource::Property(
                rest.split('.').map(str::to_owned).collect(),
            )),
            "jwt_claim" => {
                let (metadata_key, claim) = rest.split_once(':').ok_or_else(invalid)?;
                if metadata_key.is_empty() {
                    return Err(invalid());
                }
                PrincipalSource::jwt_claim(metadata_key, claim)
            }
            _ => Err(invalid()),
        }
    }

    /// Appends the source to a scope preimage: its kind, then what it reads.
    pub(crate) fn frame(&self, h: &mut FramedHasher) {
        match self {
            PrincipalSource::Header(name) => {
                h.field(b"header").field(name.as_bytes());
            }
            PrincipalSource::Property(path) => {
                h.field(b"property").count(path.len());
                for segment in path {
                    h.field(segment.as_bytes());
                }
            }
            PrincipalSource::JwtClaim {
                metadata_key,
                claim,
            } => {
                h.field(b"jwt_claim").field(metadata_key.as_bytes());
                h.count(claim.len());
                for segment in claim {
                    h.field(segment.as_bytes());
                }
            }
        }
    }
}

/// Who the request is for (K2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal<'a> {
    /// An authenticated principal (actor if present, else the caller) and the
    /// source that named it.
    Named {
        /// Where the name was read.
        source: &'a PrincipalSource,
        /// The name, trimmed.
        name: &'a str,
    },
    /// `identity.delegation: subject_and_actor` with both present: the user and the
    /// party acting for them (RFC 8693 `sub` and `act.sub`), each with its source
    /// (`docs/identity.md#the-delegated-principal`).
    Delegated {
        /// The user the request is for.
        subject: Party<'a>,
        /// The party acting on the subject's behalf.
        actor: Party<'a>,
    },
    /// Policy `anonymous: shared`: every unauthenticated caller shares one scope.
    AnonymousShared,
}

/// One name and the source that named it, as part of a [`Principal::Delegated`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Party<'a> {
    /// Where the name was read.
    pub source: &'a PrincipalSource,
    /// The name, trimmed.
    pub name: &'a str,
}

/// Why a present source names no usable principal: the request is refused
/// (400 `principal_ambiguous`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    /// The header was sent more than once.
    #[error("the principal source {0} appears more than once")]
    Repeated(String),
    /// The value is not printable UTF-8 text (or, for a JWT claim, not a string).
    #[error("the principal source {0} does not hold one printable string")]
    NotText(String),
}

/// A source's value as a principal name: trimmed of spaces and tabs, `None`
/// when empty, an error when not printable UTF-8.
pub fn name_from_bytes(
    source: &PrincipalSource,
    raw: &[u8],
) -> Result<Option<String>, PrincipalError> {
    let not_text = || PrincipalError::NotText(source.describe());
    let text = std::str::from_utf8(raw).map_err(|_| not_text())?;
    let text = text.trim_matches([' ', '\t']);
    if text.chars().any(char::is_control) {
        return Err(not_text());
    }
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// A header source's principal from the request's full header list
/// (lowercase names): `None` when the header is absent or empty.
pub fn name_from_headers(
    source: &PrincipalSource,
    name: &str,
    headers: &[(String, Vec<u8>)],
) -> Result<Option<String>, PrincipalError> {
    let mut values = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice());
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => name_from_bytes(source, value),
        (Some(_), Some(_)) => Err(PrincipalError::Repeated(source.describe())),
    }
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn h(name: &str, value: &str) -> (String, Vec<u8>) {
        (name.to_owned(), value.as_bytes().to_vec())
    }

    #[test]
    fn a_header_names_one_trimmed_principal() {
        let source = PrincipalSource::Header("x-user".into());
        let headers = vec![h("x-user", "  alice\t")];
        assert_eq!(
            name_from_headers(&source, "x-user", &headers),
            Ok(Some("alice".into()))
        );
        assert_eq!(name_from_headers(&source, "x-user", &[]), Ok(None));
        assert_eq!(
            name_from_headers(&source, "x-user", &[h("x-user", " ")]),
            Ok(None)
        );
    }

    #[test]
    fn a_repeated_header_is_refused_never_its_first_value() {
        let source = PrincipalSource::Header("x-user".into());
        let headers = vec![h("x-user", "victim"), h("X-User", "attacker")];
        assert_eq!(
            name_from_headers(&source, "x-user", &headers),
            Err(PrincipalError::Repeated("header:x-user".into()))
        );
        let headers = vec![h("x-user", ""), h("x-user", "bob")];
        assert!(name_from_headers(&source, "x-user", &headers).is_err());
    }

    #[test]
    fn values_that_are_not_printable_text_are_refused() {
        let source = PrincipalSource::Header("x-user".into());
        for raw in [&b"\xff"[..], b"a\x00b", b"a\x01", &5.0f64.to_le_bytes()] {
            assert!(name_from_bytes(&source, raw).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn structured_claims_are_refused_by_path() {
        assert_eq!(
            PrincipalSource::jwt_claim("jwt_payload", "act"),
            Err(SourceError::StructuredClaim("act".into()))
        );
        assert!(PrincipalSource::jwt_claim("jwt_payload", "act.act").is_err());
        assert!(PrincipalSource::jwt_claim("jwt_payload", "act..sub").is_err());
        assert!(PrincipalSource::jwt_claim("jwt_payload", "").is_err());
        let actor = PrincipalSource::jwt_claim("jwt_payload", "act.sub").expect("a string claim");
        assert_eq!(actor.describe(), "jwt_claim:jwt_payload:act.sub");
    }

    #[test]
    fn descriptions_round_trip() {
        for text in [
            "header:x-user",
            "property:connection.uri_san_peer_certificate",
            "jwt_claim:jwt_payload:act.sub",
        ] {
            let source = PrincipalSource::from_description(text).expect(text);
            assert_eq!(source.describe(), text);
        }
        for bad in [
            "x-user",
            "header:",
            "property:a..b",
            "jwt_claim:sub",
            "jwt_claim::sub",
            "jwt_claim:k:act",
            "cookie:x",
        ] {
            assert!(PrincipalSource::from_description(bad).is_err(), "{bad}");
        }
    }
}
