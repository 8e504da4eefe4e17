//! The identity a shipped Istio plugin configuration reads is one the shipped manifests
//! provide: every `jwt_claim` source's `metadata_key` is the issuer of a shipped
//! `RequestAuthentication` that applies to the workloads the filter runs on (Istio's
//! `jwt_authn` stores the payload under the issuer: `envoy/ISTIO.md`). Without it the claim
//! is never there, and a sidecar falls back to its peer.
//!
//! A sidecar that falls back to its mTLS peer would put every user behind the ingress
//! gateway into the gateway's scope when no JWT came: a shipped AuthorizationPolicy must
//! refuse such requests on every guarded route (`envoy/ISTIO.md`).

use serde_json::Value;

use crate::found::*;
use crate::istio_authz::{Policies, Request, strings};

/// Every `metadata_key` of a `jwt_claim` source in a plugin configuration.
fn jwt_metadata_keys(plugin: &Value) -> Vec<String> {
    let mut keys = Vec::new();
    for list in ["actor", "principal"] {
        for source in plugin
            .pointer(&format!("/identity/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(key) = source
                .pointer("/jwt_claim/metadata_key")
                .and_then(Value::as_str)
            {
                keys.push(key.to_owned());
            }
        }
    }
    keys
}

/// Every shipped object of `kind` in `namespace`.
pub(crate) fn shipped_of_kind(kind: &str, namespace: &str) -> Vec<Value> {
    shipped_objects()
        .into_iter()
        .map(|(_, doc)| doc)
        .filter(|doc| {
            doc.get("kind").and_then(Value::as_str) == Some(kind)
                && doc.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace)
        })
        .collect()
}

/// Whether a policy's `selector.matchLabels` (none: the whole namespace) selects every
/// workload an EnvoyFilter's `workloadSelector.labels` selects.
pub(crate) fn applies_to_filter_workloads(policy: &Value, filter: &Value) -> bool {
    let labels = filter
        .pointer("/spec/workloadSelector/labels")
        .cloned()
        .unwrap_or(Value::Null);
    policy
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|selector| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

#[test]
fn every_jwt_claim_source_has_a_request_authentication_for_its_issuer() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for found in shipped()
        .iter()
        .filter(|f| is_istio(f) && f.object.is_some())
    {
        let object = found.object.as_ref().expect("filtered");
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .expect("a namespace");
        let plugin: Value = serde_json::from_str(&found.json).expect("valid JSON");
        let authentications = shipped_of_kind("RequestAuthentication", namespace);
        for issuer in jwt_metadata_keys(&plugin) {
            checked += 1;
            let provided = authentications.iter().any(|ra| {
                applies_to_filter_workloads(ra, object)
                    && ra
                        .pointer("/spec/jwtRules")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .any(|rule| rule.get("issuer").and_then(Value::as_str) == Some(&issuer))
            });
            if !provided {
                missing.push(format!(
                    "{}: no RequestAuthentication in {namespace} for issuer {issuer}",
                    found.file.display()
                ));
            }
        }
    }
    assert!(checked > 0, "no shipped jwt_claim source found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Whether a plugin configuration's principal sources end in a property (the mTLS peer).
fn falls_back_to_its_peer(plugin: &Value) -> bool {
    plugin
        .pointer("/identity/principal")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|s| s.get("property").is_some())
}

/// Whether an EnvoyFilter runs its filter in sidecars (not a gateway).
fn is_sidecar(filter: &Value) -> bool {
    filter
        .pointer("/spec/configPatches")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|p| p.pointer("/match/context").and_then(Value::as_str) == Some("SIDECAR_INBOUND"))
}

#[test]
fn a_sidecar_that_falls_back_to_its_peer_requires_a_jwt_on_every_guarded_route() {
    let mut checked = 0;
    let mut open = Vec::new();
    for found in shipped()
        .iter()
        .filter(|f| is_istio(f) && f.object.is_some())
    {
        let object = found.object.as_ref().expect("filtered");
        let plugin: Value = serde_json::from_str(&found.json).expect("valid JSON");
        let peer_fallback = falls_back_to_its_peer(&plugin);
        if !is_sidecar(object) || !peer_fallback {
            continue;
        }
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .expect("a namespace");
        let mut policies = Policies::default();
        for policy in shipped_of_kind("AuthorizationPolicy", namespace) {
            if applies_to_filter_workloads(&policy, object) {
                policies.add(policy);
            }
        }
        for policy in plugin
            .get("policies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let methods = strings(policy.pointer("/match/methods"))
                .unwrap_or_else(|| vec!["POST".to_owned()]);
            let path = policy
                .pointer("/match/path_prefix")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_owned();
            for method in methods {
                checked += 1;
                let request = |request_principal: Option<&str>| Request {
                    principal: "cluster.local/ns/istio-ingress/sa/istio-ingressgateway".into(),
                    request_principal: request_principal.map(str::to_owned),
                    method: method.clone(),
                    path: path.clone(),
                    port: 8080,
                    host: "payments.example.com".into(),
                };
                let at = format!("{}: {method} {path}", found.file.display());
                if policies.admits(&request(None)) {
                    open.push(format!("{at} is admitted without a JWT"));
                }
                if !policies.admits(&request(Some("https://auth.example.com//alice"))) {
                    open.push(format!("{at} is refused even with a JWT"));
                }
            }
        }
    }
    assert!(
        checked > 0,
        "no sidecar configuration with a peer fallback found"
    );
    assert!(open.is_empty(), "{}", open.join("\n"));
}

#[test]
fn a_sidecar_that_falls_back_to_its_peer_never_takes_the_gateway_for_a_principal() {
    let found = shipped();
    let gateway_namespaces: Vec<String> = found
        .iter()
        .filter(|f| is_istio(f))
        .filter_map(|f| f.object.as_ref())
        .filter(|o| !is_sidecar(o))
        .filter_map(|o| o.pointer("/metadata/namespace").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    assert!(!gateway_namespaces.is_empty(), "no shipped gateway filter");
    let mut checked = 0;
    for f in found.iter().filter(|f| is_istio(f)) {
        if !f.object.as_ref().is_some_and(is_sidecar) {
            continue;
        }
        let plugin: Value = serde_json::from_str(&f.json).expect("valid JSON");
        let peer_fallback = falls_back_to_its_peer(&plugin);
        if !peer_fallback {
            continue;
        }
        checked += 1;
        let excluded = strings(plugin.pointer("/identity/not_principals")).unwrap_or_default();
        for namespace in &gateway_namespaces {
            let gateway = format!("spiffe://cluster.local/ns/{namespace}/");
            assert!(
                excluded.iter().any(|p| p.starts_with(&gateway)),
                "{}: the gateway of {namespace} would be the principal of every user behind \
                 it without a JWT; name it in identity.not_principals",
                f.file.display()
            );
        }
    }
    assert!(
        checked > 0,
        "no sidecar configuration with a peer fallback found"
    );
}

/// Whether a plugin configuration reads an RFC 8693 actor (a claim path `act.sub`).
fn reads_an_rfc_8693_actor(plugin: &Value) -> bool {
    plugin
        .pointer("/identity/actor")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|s| s.pointer("/jwt_claim/claim").and_then(Value::as_str) == Some("act.sub"))
}

/// Under RFC 8693 the actor acts *for* the user: a shipped configuration that reads one scopes
/// by the pair, so every user one service acts for keeps a record of their own. A claim also
/// holds the request's scope under `identity.previous`, so a previous recipe must tell those
/// users apart too: one that read the actor alone would give user B, behind the same service
/// with the same key and body, user A's recorded answer
/// (`docs/identity.md#the-delegated-principal`).
#[test]
fn a_shipped_rfc_8693_actor_scopes_by_the_user_and_the_actor_under_every_recipe() {
    use keyflight_filter::config::{Delegation, Identity};
    use keyflight_filter::parse_plugin_config;
    let pairs = |identity: &Identity| {
        identity.delegation == Delegation::SubjectAndActor
            && !identity.actor.is_empty()
            && !identity.principal.is_empty()
    };
    let mut checked = 0;
    for found in shipped() {
        let plugin: Value = serde_json::from_str(&found.json).expect("valid JSON");
        if !reads_an_rfc_8693_actor(&plugin) {
            continue;
        }
        checked += 1;
        let file = found.file.display();
        let config = parse_plugin_config(found.json.as_bytes())
            .unwrap_or_else(|e| panic!("{file}: refused: {e}"));
        let identity = &config.identity;
        assert!(pairs(identity), "{file}: {identity:?}");
        if let Some(previous) = identity.previous.as_deref() {
            assert!(
                pairs(previous)
                    && previous
                        .not_principals
                        .is_superset(&identity.not_principals),
                "{file}: identity.previous is broader than identity: {previous:?}"
            );
        }
    }
    assert!(checked > 0, "no shipped configuration reads act.sub");
}
