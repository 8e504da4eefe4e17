//! The shipped set-up makes the mesh identity the filter's credential
//! (`docs/configuration.md#caller-identity`): the lease-store trusts its sidecar's XFCC and
//! lets in exactly the workloads the AuthorizationPolicy lets reach the claim API, and no
//! shipped plugin configuration (Istio, plain Envoy or documentation) carries a token
//! (`config_dump` would print it).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::found::*;
use crate::istio_authz::strings;

fn object<'a>(objects: &'a [(std::path::PathBuf, Value)], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| {
            o.get("kind").and_then(Value::as_str) == Some(kind)
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
        .unwrap_or_else(|| panic!("no shipped {kind} {name}"))
}

/// Where `deploy/k8s/configmap.yaml` points `KEYFLIGHT_WORKLOADS_FILE`.
const WORKLOADS_FILE: &str = "/etc/keyflight/workloads/workloads";

/// Whether the lease-store container mounts the `lease-store-workloads` ConfigMap's
/// `workloads` key at [`WORKLOADS_FILE`] through a directory mount.
fn workloads_mounted(deployment: &Value) -> bool {
    let Some((dir, file)) = WORKLOADS_FILE.rsplit_once('/') else {
        return false;
    };
    let spec = &deployment["spec"]["template"]["spec"];
    let volume = spec["volumes"].as_array().into_iter().flatten().find(|v| {
        v.pointer("/configMap/name").and_then(Value::as_str) == Some("lease-store-workloads")
            && v.pointer("/configMap/items")
                .and_then(Value::as_array)
                .is_some_and(|items| {
                    items
                        .iter()
                        .any(|i| i["key"] == "workloads" && i["path"] == file)
                })
    });
    let Some(name) = volume.and_then(|v| v["name"].as_str()) else {
        return false;
    };
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["name"] == name && m["mountPath"] == dir && m.get("subPath").is_none())
        })
}

#[test]
fn the_store_allowlists_exactly_the_workloads_the_mesh_lets_claim() {
    let objects = shipped_objects();
    let settings = &object(&objects, "ConfigMap", "lease-store")["data"];
    assert_eq!(settings["KEYFLIGHT_TRUST_XFCC"], "true");
    assert_eq!(
        settings["KEYFLIGHT_WORKLOADS_FILE"], WORKLOADS_FILE,
        "the store reads its allowlist from the mounted file, re-read when it changes"
    );
    assert!(
        workloads_mounted(object(&objects, "Deployment", "lease-store")),
        "deploy/k8s/deployment.yaml mounts the lease-store-workloads ConfigMap's `workloads` \
         as {WORKLOADS_FILE}, as a directory (a subPath mount is never updated)"
    );
    let allowlisted: BTreeSet<String> =
        object(&objects, "ConfigMap", "lease-store-workloads")["data"]["workloads"]
            .as_str()
            .expect("`workloads` in deploy/k8s/workloads.yaml")
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(str::to_owned)
            .collect();
    let policy = object(&objects, "AuthorizationPolicy", "lease-store");
    let mut claimers = BTreeSet::new();
    for rule in policy["spec"]["rules"].as_array().expect("rules") {
        let claims = rule["to"].as_array().into_iter().flatten().any(|to| {
            strings(to.pointer("/operation/paths"))
                .is_some_and(|paths| paths.iter().any(|p| p.starts_with("/v1/claims")))
        });
        if claims {
            for from in rule["from"].as_array().into_iter().flatten() {
                for principal in strings(from.pointer("/source/principals")).unwrap_or_default() {
                    claimers.insert(format!("spiffe://{principal}"));
                }
            }
        }
    }
    assert!(!claimers.is_empty());
    assert_eq!(
        allowlisted, claimers,
        "deploy/k8s/workloads.yaml and the claim rule's principals of \
         envoy/istio/lease-store/authorization-policy.yaml"
    );
}

#[test]
fn no_shipped_plugin_configuration_holds_a_token() {
    for found in shipped() {
        let plugin: Value = serde_json::from_str(&found.json).expect("plugin JSON");
        assert!(
            plugin["lease_store"].get("token").is_none(),
            "{}: config_dump prints an inline lease_store.token (deprecated: the mesh identity, \
             or the VM environment, carries the credential)",
            found.file.display()
        );
    }
}
