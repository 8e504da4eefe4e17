//! What this adapter's host cannot read, refused when a configuration names it
//! (`filter-native/README.md#not-yet-equal`).
//!
//! A JWT claim is a field inside the one `Struct` `jwt_authn` writes, and Envoy 1.40's HTTP
//! dynamic-module ABI reads dynamic metadata one level deep
//! (`docs/envoy-facts.md#dynamic-modules`). A source the host cannot read finds nothing, as
//! if the claim were absent, so the request would fall to the next source and get another
//! scope than the Wasm filter gives it: during a move from one adapter to the other, the
//! same request could run twice. Refused at load instead, with the setting named.

use keyflight_filter::Config;
use keyflight_filter::config::Identity;
use keyflight_protocol::principal::PrincipalSource;

/// The path of the first principal source this adapter cannot read, and why; `None` when
/// it can read them all.
pub fn unreadable_source(config: &Config) -> Option<String> {
    let current = ("identity", &config.identity);
    let previous = config
        .identity
        .previous
        .as_deref()
        .map(|previous| ("identity.previous", previous));
    [Some(current), previous]
        .into_iter()
        .flatten()
        .find_map(|(at, identity)| jwt_claim_in(at, identity))
        .map(|at| {
            format!(
                "{at}: the native adapter cannot read a JWT claim on Envoy 1.40 (its HTTP ABI \
                 reads dynamic metadata one level deep); run the Wasm filter for this \
                 configuration"
            )
        })
}

/// The path of the first JWT-claim source of `identity`, at `at`.
fn jwt_claim_in(at: &str, identity: &Identity) -> Option<String> {
    [
        ("actor", &identity.actor),
        ("principal", &identity.principal),
    ]
    .into_iter()
    .find_map(|(list, sources)| {
        sources
            .iter()
            .position(|source| matches!(**source, PrincipalSource::JwtClaim { .. }))
            .map(|i| format!("{at}.{list}[{i}].jwt_claim"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(identity: &str) -> Config {
        let json = format!(
            r#"{{"lease_store": {{"cluster": "lease_store", "authority": "lease-store"}},
                "identity": {identity},
                "policies": [{{"name": "p", "match": {{"path_prefix": "/"}}}}]}}"#
        );
        keyflight_filter::parse_plugin_config(json.as_bytes()).expect("a valid configuration")
    }

    #[test]
    fn headers_and_properties_are_read() {
        let config = config(
            r#"{"principal": [{"header": "x-user"}, {"property": ["connection", "uri_san_peer_certificate"]}]}"#,
        );
        assert_eq!(unreadable_source(&config), None);
    }

    #[test]
    fn a_jwt_claim_is_named_wherever_it_is() {
        let current = config(
            r#"{"principal": [{"header": "x-user"}, {"jwt_claim": {"metadata_key": "jwt_payload", "claim": "sub"}}]}"#,
        );
        let refused = unreadable_source(&current).expect("refused");
        assert!(
            refused.starts_with("identity.principal[1].jwt_claim: "),
            "{refused}"
        );

        let previous = config(
            r#"{"actor": [{"header": "x-actor"}], "principal": [{"header": "x-user"}],
                "previous": {"actor": [{"jwt_claim": {"metadata_key": "jwt_payload", "claim": "azp"}}],
                             "principal": [{"header": "x-user"}]}}"#,
        );
        let refused = unreadable_source(&previous).expect("refused");
        assert!(
            refused.starts_with("identity.previous.actor[0].jwt_claim: "),
            "{refused}"
        );
    }
}
