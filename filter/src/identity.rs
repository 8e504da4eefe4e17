//! K2: choosing the effective principal.
//!
//! The actor (on-behalf-of) sources are tried first, then the principal
//! sources, each list in configured order; the first source that yields a
//! non-empty UTF-8 value wins. Header sources are read from the captured
//! request headers; property and JWT-claim sources go through a lookup the
//! adapter supplies (`get_property` in Envoy, a map in tests), so this module
//! stays pure.
//!
//! What Envoy 1.40 returns for these properties (checked): a string leaf, such
//! as `…jwt_authn.<key>.sub` or `…<key>.act.sub`, comes back as its raw UTF-8
//! bytes, because Envoy walks the nested claims itself; a number comes back as
//! an 8-byte double, an object as proxy-wasm's serialized pairs, and the whole
//! `metadata` as protobuf bytes. A principal must therefore be printable text:
//! a value with control bytes (a non-string claim) is treated as absent rather
//! than hashed into a scope nobody could name.

use crate::config::{Identity, Source};

/// The effective principal, or `None` when no source is present.
///
/// `headers` is the request's full header list (lowercase names);
/// `property` reads an Envoy property path.
pub fn resolve<F>(
    identity: &Identity,
    headers: &[(String, Vec<u8>)],
    mut property: F,
) -> Option<String>
where
    F: FnMut(&[&str]) -> Option<Vec<u8>>,
{
    identity
        .actor
        .iter()
        .chain(&identity.principal)
        .find_map(|source| read(source, headers, &mut property))
}

fn read<F>(source: &Source, headers: &[(String, Vec<u8>)], property: &mut F) -> Option<String>
where
    F: FnMut(&[&str]) -> Option<Vec<u8>>,
{
    let property_value;
    let raw: &[u8] = match source {
        Source::Header(name) => headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())?,
        Source::Property(_) | Source::JwtClaim { .. } => {
            property_value = property(&source.property_path()?)?;
            &property_value
        }
    };
    let text = std::str::from_utf8(raw).ok()?.trim();
    (!text.is_empty() && !text.chars().any(char::is_control)).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            actor: vec![Source::Header("x-actor".into())],
            principal: vec![
                Source::Header("x-user".into()),
                Source::Property(vec!["connection".into(), "uri_san_peer_certificate".into()]),
                Source::JwtClaim {
                    metadata_key: "jwt_payload".into(),
                    claim: "sub".into(),
                },
            ],
        }
    }

    fn h(name: &str, value: &str) -> (String, Vec<u8>) {
        (name.to_owned(), value.as_bytes().to_vec())
    }

    fn no_props(_: &[&str]) -> Option<Vec<u8>> {
        None
    }

    #[test]
    fn actor_wins_over_principal() {
        let headers = vec![h("x-user", "alice"), h("x-actor", "support-bot")];
        assert_eq!(
            resolve(&identity(), &headers, no_props).as_deref(),
            Some("support-bot")
        );
    }

    #[test]
    fn principal_sources_in_order() {
        let headers = vec![h("x-user", "alice")];
        assert_eq!(
            resolve(&identity(), &headers, no_props).as_deref(),
            Some("alice")
        );
        let spiffe = |path: &[&str]| {
            (path == ["connection", "uri_san_peer_certificate"])
                .then(|| b"spiffe://mesh/ns/a/sa/b".to_vec())
        };
        assert_eq!(
            resolve(&identity(), &[], spiffe).as_deref(),
            Some("spiffe://mesh/ns/a/sa/b")
        );
    }

    #[test]
    fn jwt_claim_reads_the_jwt_authn_metadata_path() {
        let jwt = |path: &[&str]| {
            (path
                == [
                    "metadata",
                    "filter_metadata",
                    "envoy.filters.http.jwt_authn",
                    "jwt_payload",
                    "sub",
                ])
            .then(|| b"user-42".to_vec())
        };
        assert_eq!(resolve(&identity(), &[], jwt).as_deref(), Some("user-42"));
    }

    #[test]
    fn a_dotted_claim_reads_the_nested_actor() {
        let identity = Identity {
            actor: vec![Source::JwtClaim {
                metadata_key: "jwt_payload".into(),
                claim: "act.sub".into(),
            }],
            principal: vec![Source::JwtClaim {
                metadata_key: "jwt_payload".into(),
                claim: "sub".into(),
            }],
        };
        let prefix = [
            "metadata",
            "filter_metadata",
            "envoy.filters.http.jwt_authn",
            "jwt_payload",
        ];
        // What Envoy answers for a token {"sub": "svc", "act": {"sub": "ada"}}.
        let on_behalf = |path: &[&str]| match path.split_at(4) {
            (p, ["act", "sub"]) if p == prefix => Some(b"ada".to_vec()),
            (p, ["sub"]) if p == prefix => Some(b"svc".to_vec()),
            _ => None,
        };
        assert_eq!(resolve(&identity, &[], on_behalf).as_deref(), Some("ada"));
        // No `act` claim: the service itself.
        let own =
            |path: &[&str]| (path == [&prefix[..], &["sub"]].concat()).then(|| b"svc".to_vec());
        assert_eq!(resolve(&identity, &[], own).as_deref(), Some("svc"));
    }

    #[test]
    fn a_non_string_claim_is_absent() {
        let identity = Identity {
            actor: vec![],
            principal: vec![Source::JwtClaim {
                metadata_key: "jwt_payload".into(),
                claim: "n".into(),
            }],
        };
        // Envoy's encoding of the number 5.0 (a little-endian double).
        let number = |_: &[&str]| Some(5.0f64.to_le_bytes().to_vec());
        assert_eq!(resolve(&identity, &[], number), None);
        // proxy-wasm's serialized pairs for an object claim.
        let object = |_: &[&str]| {
            Some(b"\x01\x00\x00\x00\x03\x00\x00\x00\x03\x00\x00\x00sub\x00ada\x00".to_vec())
        };
        assert_eq!(resolve(&identity, &[], object), None);
    }

    #[test]
    fn empty_or_non_utf8_values_are_absent() {
        let headers = vec![h("x-actor", "  "), (String::from("x-user"), vec![0xff])];
        assert_eq!(resolve(&identity(), &headers, no_props), None);
        assert_eq!(resolve(&Identity::default(), &headers, no_props), None);
    }
}
