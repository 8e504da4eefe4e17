//! Every shipped plugin configuration is accepted, and the Istio manifests
//! hold headers, fail closed, use Istio clusters and run their stage's mode.

use std::collections::BTreeMap;
use std::path::Path;

use keyflight_filter::config::Mode;
use keyflight_filter::parse_plugin_config;
use serde_json::Value;

use crate::found::*;

#[test]
fn every_shipped_plugin_configuration_is_accepted() {
    let found = shipped();
    let mut failures = Vec::new();
    for f in &found {
        if let Err(e) = parse_plugin_config(f.json.as_bytes()) {
            failures.push(format!("{}: {e}", f.file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "refused plugin configurations:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_known_places_ship_plugin_configurations() {
    // Guards the search itself: if a refactor of this file (or of the manifests) made it
    // find nothing, every other test here would pass vacuously.
    let found = shipped();
    let per_file = found.iter().fold(BTreeMap::new(), |mut m, f| {
        *m.entry(f.file.clone()).or_insert(0) += 1;
        m
    });
    for file in [
        "envoy/demo.yaml",
        "envoy/istio/rollout/keyflight-dry-run.yaml",
        "envoy/istio/rollout/keyflight-enforce.yaml",
        "envoy/istio/gateway/keyflight-gateway.yaml",
        "envoy/ISTIO.md",
        "deploy/envoy-gateway/envoy-extension-policy.yaml",
    ] {
        assert!(
            per_file.contains_key(Path::new(file)),
            "no plugin configuration found in {file}; found: {per_file:?}"
        );
    }
}

#[test]
fn a_broken_configuration_in_a_shipped_place_would_be_caught() {
    let found = shipped();
    let first = found.first().expect("at least one shipped configuration");
    let mut json: Value = serde_json::from_str(&first.json).expect("valid JSON");
    json["lease_store"]["timeout_ms"] = Value::from(0);
    let err = parse_plugin_config(json.to_string().as_bytes())
        .expect_err("a zero timeout must be refused");
    assert_eq!(err.path, "lease_store.timeout_ms");
}

#[test]
fn istio_wasm_filters_hold_headers_fail_closed_and_use_istio_clusters() {
    let found = shipped();
    let istio: Vec<&Found> = found.iter().filter(|f| is_istio(f)).collect();
    assert!(!istio.is_empty(), "no Istio plugin configurations found");
    for f in istio {
        let file = f.file.display();
        let filter = f
            .wasm_filter
            .as_ref()
            .unwrap_or_else(|| panic!("{file}: keyflight needs an EnvoyFilter Wasm config"));
        assert_eq!(
            filter.pointer("/config/allow_on_headers_stop_iteration"),
            Some(&Value::Bool(true)),
            "{file}: without allow_on_headers_stop_iteration guarded requests hang"
        );
        assert_eq!(
            filter
                .pointer("/config/failure_policy")
                .and_then(Value::as_str),
            Some("FAIL_CLOSED"),
            "{file}: the filter must fail closed"
        );
        let code = filter
            .pointer("/config/vm_config/code/remote")
            .unwrap_or_else(|| panic!("{file}: the module must come from the OCI image"));
        let uri = code
            .pointer("/http_uri/uri")
            .and_then(Value::as_str)
            .unwrap_or("");
        assert!(
            uri.starts_with("oci://"),
            "{file}: module uri {uri:?} is not oci://"
        );
        let sha = code.get("sha256").and_then(Value::as_str).unwrap_or("");
        assert!(
            sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "{file}: sha256 {sha:?} is not 64 hex digits"
        );

        let config = parse_plugin_config(f.json.as_bytes()).expect("accepted (checked above)");
        let cluster = &config.lease_store.cluster;
        let parts: Vec<&str> = cluster.split('|').collect();
        assert!(
            parts.len() == 4
                && parts[0] == "outbound"
                && parts[1].parse::<u16>().is_ok()
                && parts[2].is_empty()
                && parts[3].ends_with(".svc.cluster.local"),
            "{file}: lease_store.cluster {cluster:?} is not Istio's outbound|<port>||<fqdn>"
        );

        let object = f.object.as_ref().expect("an Istio object");
        let buffer_limit = object
            .pointer("/spec/configPatches")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("applyTo").and_then(Value::as_str) == Some("LISTENER"))
            .find_map(|p| p.pointer("/patch/value/per_connection_buffer_limit_bytes"))
            .and_then(Value::as_u64)
            .unwrap_or(1024 * 1024);
        for policy in &config.policies {
            assert!(
                (policy.max_request_body_bytes as u64) < buffer_limit
                    && (policy.max_cacheable_response_bytes as u64) < buffer_limit,
                "{file}: policy {} caps must stay under the {buffer_limit}-byte buffer limit",
                policy.name
            );
        }
    }
}

#[test]
fn rollout_stages_run_the_mode_their_label_selects() {
    let stages: Vec<Found> = shipped()
        .into_iter()
        .filter(|f| f.file.starts_with("envoy/istio/rollout"))
        .collect();
    assert!(stages.len() >= 2, "expected a dry-run and an enforce stage");
    let mut policies_by_mode = BTreeMap::new();
    for f in &stages {
        let object = f.object.as_ref().expect("an EnvoyFilter");
        let selected = object
            .pointer("/spec/workloadSelector/labels/keyflight.io~1mode")
            .and_then(Value::as_str)
            .unwrap_or_else(|| {
                panic!(
                    "{}: a stage must select pods by keyflight.io/mode",
                    f.file.display()
                )
            });
        let config = parse_plugin_config(f.json.as_bytes()).expect("accepted");
        let expected = match selected {
            "dry-run" => Mode::DryRun,
            "enforce" => Mode::Enforce,
            other => panic!("{}: unknown stage label {other:?}", f.file.display()),
        };
        assert_eq!(
            config.mode,
            expected,
            "{}: label and mode disagree",
            f.file.display()
        );
        let mut json: Value = serde_json::from_str(&f.json).expect("valid JSON");
        json.as_object_mut().expect("an object").remove("mode");
        policies_by_mode.insert(selected.to_owned(), json);
    }
    assert_eq!(
        policies_by_mode.get("dry-run"),
        policies_by_mode.get("enforce"),
        "the dry-run and enforce stages must differ only in mode"
    );
}
