//! K2: choosing the effective principal.
//!
//! Both lists are read, each in configured order, and the first present source
//! of each names its party: when both name someone the principal is the pair
//! (the default, `identity.delegation: subject_and_actor`), else the one named
//! (`docs/identity.md#the-delegated-principal`). Under `delegation: actor` a
//! present actor alone is the principal. A source that is present but does not name exactly
//! one principal stops the search and the request is refused (400
//! `principal_ambiguous`) rather than falling through: falling through from a
//! broken actor to the service's own identity would put every end user behind
//! that service into one scope.
//!
//! Header sources are read from the captured request headers with the rules of
//! [`keyflight_protocol::principal`] (trimmed, empty is absent, repeated or not
//! printable is refused); property and JWT-claim sources go through a lookup
//! the adapter supplies (`get_property` in Envoy, a map in tests), so this
//! module stays pure.
//!
//! A name listed in `identity.not_principals` (a peer such as the ingress
//! gateway) is read as absent and the search goes on: behind the gateway, a
//! request with no user source left has no principal (401), never the
//! gateway's scope.
//!
//! What Envoy 1.40 returns for properties (checked): a string leaf comes back
//! as its raw UTF-8 bytes; a number as an 8-byte double, a boolean as one
//! byte, an object or list as proxy-wasm's serialized pairs — and the whole
//! `metadata` as protobuf `envoy.config.core.v3.Metadata`. A JWT claim is
//! therefore read from that protobuf, which keeps the claim's JSON type
//! ([`crate::jwt_claims`]): only a JSON string is a principal, never the bytes
//! of a number or an object. A plain property source has no such typed view;
//! its value must be printable text, or the request is refused.

use std::rc::Rc;

use keyflight_protocol::principal::{self, PrincipalError, PrincipalSource};

use crate::config::{Delegation, Identity};
use crate::jwt_claims::{self, Claim};

/// What the configured sources say about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The first present source and the principal it names.
    Found {
        /// The source, as configured.
        source: Rc<PrincipalSource>,
        /// The principal, trimmed.
        name: String,
    },
    /// Both an actor and a subject are present (under `delegation: subject_and_actor`).
    Delegated {
        /// The first present principal source and its name.
        subject: Named,
        /// The first present actor source and its name.
        actor: Named,
    },
    /// No source is present.
    Absent,
    /// A present source does not name exactly one principal.
    Refused(PrincipalError),
}

/// A name and the source that named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The source, as configured.
    pub source: Rc<PrincipalSource>,
    /// The name, trimmed.
    pub name: String,
}

impl From<Named> for Lookup {
    fn from(Named { source, name }: Named) -> Self {
        Lookup::Found { source, name }
    }
}

/// The effective principal of a request.
///
/// `headers` is the request's full header list (lowercase names);
/// `property` reads an Envoy property path.
pub fn resolve<F>(identity: &Identity, headers: &[(String, Vec<u8>)], property: F) -> Lookup
where
    F: FnMut(&[&str]) -> Option<Vec<u8>>,
{
    let mut reader = Reader {
        identity,
        headers,
        property,
        metadata: None,
    };
    let actor = match reader.first(&identity.actor) {
        Ok(actor) => actor,
        Err(error) => return Lookup::Refused(error),
    };
    if identity.delegation == Delegation::Actor
        && let Some(actor) = actor
    {
        return actor.into();
    }
    let subject = match reader.first(&identity.principal) {
        Ok(subject) => subject,
        Err(error) => return Lookup::Refused(error),
    };
    match (subject, actor) {
        (Some(subject), Some(actor)) => Lookup::Delegated { subject, actor },
        (Some(one), None) | (None, Some(one)) => one.into(),
        (None, None) => Lookup::Absent,
    }
}

/// Reads sources of one request, its JWT metadata at most once.
struct Reader<'a, F> {
    identity: &'a Identity,
    headers: &'a [(String, Vec<u8>)],
    property: F,
    /// Read once, and only if a JWT source is consulted.
    metadata: Option<Option<Vec<u8>>>,
}

impl<F> Reader<'_, F>
where
    F: FnMut(&[&str]) -> Option<Vec<u8>>,
{
    /// The first present source of `sources` that names a principal (a name in
    /// `not_principals` reads as absent); an error when a present one names none.
    fn first(&mut self, sources: &[Rc<PrincipalSource>]) -> Result<Option<Named>, PrincipalError> {
        for source in sources {
            match self.read(source)? {
                Some(name) if !self.identity.not_principals.contains(&name) => {
                    return Ok(Some(Named {
                        source: Rc::clone(source),
                        name,
                    }));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    fn read(&mut self, source: &PrincipalSource) -> Result<Option<String>, PrincipalError> {
        match source {
            PrincipalSource::Header(name) => {
                principal::name_from_headers(source, name, self.headers)
            }
            PrincipalSource::Property(path) => {
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                match (self.property)(&path) {
                    Some(raw) => principal::name_from_bytes(source, &raw),
                    None => Ok(None),
                }
            }
            PrincipalSource::JwtClaim {
                metadata_key,
                claim,
            } => {
                let property = &mut self.property;
                let metadata = self.metadata.get_or_insert_with(|| property(&["metadata"]));
                let found = metadata
                    .as_deref()
                    .map_or(Claim::Absent, |m| jwt_claims::find(m, metadata_key, claim));
                match found {
                    Claim::Absent => Ok(None),
                    Claim::String(raw) => principal::name_from_bytes(source, &raw),
                    Claim::NotAString | Claim::Unreadable => {
                        Err(PrincipalError::NotText(source.describe()))
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str) -> Rc<PrincipalSource> {
        Rc::new(PrincipalSource::Header(name.into()))
    }

    fn jwt(claim: &str) -> Rc<PrincipalSource> {
        Rc::new(PrincipalSource::jwt_claim("jwt_payload", claim).unwrap())
    }

    fn identity() -> Identity {
        Identity {
            actor: vec![header("x-actor")],
            principal: vec![
                header("x-user"),
                Rc::new(PrincipalSource::Property(vec![
                    "connection".into(),
                    "uri_san_peer_certificate".into(),
                ])),
                jwt("sub"),
            ],
            ..Identity::default()
        }
    }

    fn h(name: &str, value: &str) -> (String, Vec<u8>) {
        (name.to_owned(), value.as_bytes().to_vec())
    }

    fn no_props(_: &[&str]) -> Option<Vec<u8>> {
        None
    }

    fn found(lookup: Lookup) -> Option<(String, String)> {
        match lookup {
            Lookup::Found { source, name } => Some((source.describe(), name)),
            _ => None,
        }
    }

    /// The `metadata` Envoy 1.40 answered behind jwt_authn for
    /// `{"sub": "svc", "n": 2261634.5098039214, "b": true, "l": ["x", "y"],
    /// "act": {"sub": "ada", "x": 1}}` (see `jwt_claims`).
    fn jwt_metadata(path: &[&str]) -> Option<Vec<u8>> {
        (path == ["metadata"]).then(|| hex::decode("0ac2010a1c656e766f792e66696c746572732e687474702e6a77745f617574686e12a1010a9e010a0b6a77745f7061796c6f6164128e012a8b010a110a016c120c320a0a031a01780a031a01790a270a0361637412202a1e0a0c0a0373756212051a036164610a0e0a0178120911000000000000f03f0a0e0a016e12091141414141414141410a260a03697373121f1a1d68747470733a2f2f6973737565722e6b6579666c696768742e746573740a070a0162120220010a0c0a0373756212051a03737663").unwrap())
    }

    /// `delegation: actor`, asked for by name.
    fn actor_first() -> Identity {
        Identity {
            delegation: Delegation::Actor,
            ..identity()
        }
    }

    #[test]
    fn under_delegation_actor_the_actor_wins_over_the_subject() {
        let headers = vec![h("x-user", "alice"), h("x-actor", "support-bot")];
        assert_eq!(
            found(resolve(&actor_first(), &headers, no_props)),
            Some(("header:x-actor".into(), "support-bot".into()))
        );
    }

    #[test]
    fn principal_sources_in_order() {
        let headers = vec![h("x-user", " alice ")];
        assert_eq!(
            found(resolve(&identity(), &headers, no_props)),
            Some(("header:x-user".into(), "alice".into()))
        );
        let spiffe = |path: &[&str]| {
            (path == ["connection", "uri_san_peer_certificate"])
                .then(|| b"spiffe://mesh/ns/a/sa/b".to_vec())
        };
        assert_eq!(
            found(resolve(&identity(), &[], spiffe)),
            Some((
                "property:connection.uri_san_peer_certificate".into(),
                "spiffe://mesh/ns/a/sa/b".into()
            ))
        );
        assert_eq!(
            found(resolve(&identity(), &[], jwt_metadata)),
            Some(("jwt_claim:jwt_payload:sub".into(), "svc".into()))
        );
        assert_eq!(resolve(&identity(), &[], no_props), Lookup::Absent);
    }

    #[test]
    fn a_peer_named_in_not_principals_never_counts() {
        const GATEWAY: &str = "spiffe://mesh/ns/istio-ingress/sa/gateway";
        let mut identity = identity();
        identity.not_principals = [GATEWAY.to_owned()].into();
        let peer = |name: &'static str| {
            move |path: &[&str]| {
                (path == ["connection", "uri_san_peer_certificate"])
                    .then(|| name.as_bytes().to_vec())
            }
        };
        assert_eq!(
            resolve(&identity, &[], peer(GATEWAY)),
            Lookup::Absent,
            "the gateway is no principal"
        );
        assert_eq!(
            found(resolve(&identity, &[h("x-user", "alice")], peer(GATEWAY))),
            Some(("header:x-user".into(), "alice".into()))
        );
        assert_eq!(
            found(resolve(&identity, &[], peer("spiffe://mesh/ns/a/sa/b"))),
            Some((
                "property:connection.uri_san_peer_certificate".into(),
                "spiffe://mesh/ns/a/sa/b".into()
            ))
        );
    }

    fn pair(lookup: Lookup) -> Option<(String, String, String, String)> {
        match lookup {
            Lookup::Delegated { subject, actor } => Some((
                subject.source.describe(),
                subject.name,
                actor.source.describe(),
                actor.name,
            )),
            _ => None,
        }
    }

    #[test]
    fn by_default_a_delegated_principal_is_the_subject_and_the_actor() {
        let headers = vec![h("x-user", "alice"), h("x-actor", "support-bot")];
        assert_eq!(
            pair(resolve(&identity(), &headers, no_props)),
            Some((
                "header:x-user".into(),
                "alice".into(),
                "header:x-actor".into(),
                "support-bot".into()
            ))
        );
        // The RFC 8693 token: `sub` is the user, `act.sub` the party acting for them.
        let jwt_identity = Identity {
            actor: vec![jwt("act.sub")],
            principal: vec![jwt("sub")],
            ..Identity::default()
        };
        assert_eq!(
            pair(resolve(&jwt_identity, &[], jwt_metadata)),
            Some((
                "jwt_claim:jwt_payload:sub".into(),
                "svc".into(),
                "jwt_claim:jwt_payload:act.sub".into(),
                "ada".into()
            ))
        );
    }

    #[test]
    fn a_delegated_identity_with_one_party_reads_as_the_actor_first_one() {
        for headers in [vec![h("x-user", "alice")], vec![h("x-actor", "bot")]] {
            assert_eq!(
                resolve(&identity(), &headers, no_props),
                resolve(&actor_first(), &headers, no_props),
                "{headers:?}"
            );
        }
        assert_eq!(resolve(&identity(), &[], no_props), Lookup::Absent);
        // A subject named in not_principals leaves the actor alone.
        let mut identity = identity();
        identity.not_principals = ["alice".to_owned()].into();
        let headers = vec![h("x-user", "alice"), h("x-actor", "bot")];
        assert_eq!(
            found(resolve(&identity, &headers, no_props)),
            Some(("header:x-actor".into(), "bot".into()))
        );
    }

    #[test]
    fn a_delegated_identity_refuses_an_ambiguous_subject_beside_an_actor() {
        // Under `actor` the subject is never read once an actor is found; the pair needs
        // both, so a subject sent twice is refused rather than dropped.
        let headers = vec![
            h("x-user", "victim"),
            h("x-user", "attacker"),
            h("x-actor", "bot"),
        ];
        assert_eq!(
            found(resolve(&actor_first(), &headers, no_props)),
            Some(("header:x-actor".into(), "bot".into()))
        );
        assert_eq!(
            resolve(&identity(), &headers, no_props),
            Lookup::Refused(PrincipalError::Repeated("header:x-user".into()))
        );
    }

    #[test]
    fn a_repeated_header_is_refused_never_its_first_value() {
        let headers = vec![h("x-user", "victim"), h("x-user", "attacker")];
        assert_eq!(
            resolve(&identity(), &headers, jwt_metadata),
            Lookup::Refused(PrincipalError::Repeated("header:x-user".into()))
        );
    }

    #[test]
    fn a_dotted_claim_reads_the_nested_actor() {
        let identity = Identity {
            actor: vec![jwt("act.sub")],
            principal: vec![jwt("sub")],
            delegation: Delegation::Actor,
            ..Identity::default()
        };
        assert_eq!(
            found(resolve(&identity, &[], jwt_metadata)),
            Some(("jwt_claim:jwt_payload:act.sub".into(), "ada".into()))
        );
        // No token: nothing, and the metadata is read once.
        let mut reads = 0;
        let lookup = resolve(&identity, &[], |_: &[&str]| {
            reads += 1;
            None
        });
        assert_eq!((lookup, reads), (Lookup::Absent, 1));
    }

    #[test]
    fn a_claim_that_is_not_a_string_is_refused_not_skipped() {
        // "n" is a number whose property bytes happen to be printable.
        for claim in ["n", "b", "l", "act.x"] {
            let identity = Identity {
                actor: vec![jwt(claim)],
                principal: vec![jwt("sub")],
                ..Identity::default()
            };
            assert!(
                matches!(
                    resolve(&identity, &[], jwt_metadata),
                    Lookup::Refused(PrincipalError::NotText(_))
                ),
                "{claim}"
            );
        }
    }

    #[test]
    fn property_values_must_be_printable_text() {
        let identity = Identity {
            actor: vec![],
            principal: vec![Rc::new(PrincipalSource::Property(vec!["x".into()]))],
            ..Identity::default()
        };
        let number = |_: &[&str]| Some(5.0f64.to_le_bytes().to_vec());
        assert!(matches!(
            resolve(&identity, &[], number),
            Lookup::Refused(_)
        ));
        let empty = |_: &[&str]| Some(b"  ".to_vec());
        assert_eq!(resolve(&identity, &[], empty), Lookup::Absent);
    }

    #[test]
    fn empty_values_are_absent_and_the_search_goes_on() {
        let headers = vec![h("x-actor", "  "), h("x-user", "bob")];
        assert_eq!(
            found(resolve(&identity(), &headers, no_props)),
            Some(("header:x-user".into(), "bob".into()))
        );
        assert_eq!(
            resolve(&Identity::default(), &headers, no_props),
            Lookup::Absent
        );
    }
}
