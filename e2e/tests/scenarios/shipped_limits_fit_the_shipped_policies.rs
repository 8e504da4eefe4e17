//! The shipped lease-store's limits are sized to the shipped policies that call it
//! (`docs/configuration.md#limits`): what a record may hold and for how long covers what
//! every one of those policies records, and not much more, so a caller cannot park records
//! larger or longer-lived than any shipped policy would; the body limit is the one the
//! filters pack their batches by.
//!
//! The policies are the plugin configurations under `envoy/` whose lease-store is the
//! Service `deploy/k8s/` runs, read with the filter's own parser.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use keyflight_filter::config::{Config, finalize_bytes, parse_plugin_config};
use keyflight_protocol::time::parse_duration;
use keyflight_testkit::shipped::{files_under, workspace_root, yaml_documents};
use serde_json::Value;

/// The authority of the Service `deploy/k8s/` runs the lease-store behind.
const SHIPPED_STORE: &str = "lease-store.keyflight.svc.cluster.local:8480";

/// How far past the largest need a shipped limit may go.
const SLACK: u64 = 2;

/// Every plugin configuration (a `StringValue` whose JSON names a `lease_store`) in `doc`.
fn plugin_configs(doc: &Value, out: &mut Vec<String>) {
    match doc {
        Value::Object(map) => {
            let json = map
                .get("value")
                .and_then(Value::as_str)
                .filter(|_| {
                    map.get("@type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t.ends_with("StringValue"))
                })
                .filter(|text| text.contains("\"lease_store\""));
            if let Some(json) = json {
                out.push(json.to_owned());
            }
            map.values().for_each(|v| plugin_configs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| plugin_configs(v, out)),
        _ => {}
    }
}

/// Every shipped filter configuration that calls the shipped store, by file.
fn shipped_policies() -> Vec<(String, Config)> {
    let root = workspace_root();
    let mut found = Vec::new();
    for file in files_under(&root.join("envoy"), &[".yaml", ".yml"]) {
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut configs = Vec::new();
        for doc in yaml_documents(&text, &file) {
            plugin_configs(&doc, &mut configs);
        }
        for json in configs {
            let config = parse_plugin_config(json.as_bytes())
                .unwrap_or_else(|e| panic!("{shown}: the filter refuses its configuration: {e}"));
            if config.lease_store.authority == SHIPPED_STORE {
                found.push((shown.clone(), config));
            }
        }
    }
    found
}

/// The shipped ConfigMap's settings.
fn shipped_settings() -> BTreeMap<String, String> {
    let file = workspace_root().join("deploy/k8s/configmap.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let doc = yaml_documents(&text, &file).remove(0);
    serde_json::from_value(doc["data"].clone()).unwrap()
}

/// A setting the ConfigMap must make itself: the binary's defaults fit no policy in
/// particular.
fn setting<'a>(settings: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    settings
        .get(name)
        .unwrap_or_else(|| panic!("deploy/k8s/configmap.yaml sets no {name}"))
}

/// `shipped` covers `needed` and is at most [`SLACK`] times it.
fn sized(what: &str, shipped: u64, needed: u64) {
    assert!(
        (needed..=needed * SLACK).contains(&shipped),
        "{what} is {shipped}: the shipped policies need {needed}, and it should be at most {SLACK} times that"
    );
}

#[test]
fn the_shipped_store_keeps_records_no_larger_or_longer_than_the_shipped_policies_need() {
    let configs = shipped_policies();
    assert!(
        configs.len() >= 3,
        "expected the gateway's and the rollout's configurations, found {:?}",
        configs.iter().map(|(file, _)| file).collect::<Vec<_>>()
    );
    let policies = || {
        configs
            .iter()
            .flat_map(|(_, config)| config.policies.iter())
    };
    let largest_record = policies()
        .map(|p| p.max_cacheable_response_bytes as u64)
        .max()
        .unwrap();
    let longest_retention = policies().map(|p| p.retention).max().unwrap();
    let settings = shipped_settings();

    let max_record: u64 = setting(&settings, "KEYFLIGHT_MAX_RECORD_BYTES")
        .parse()
        .unwrap();
    sized("KEYFLIGHT_MAX_RECORD_BYTES", max_record, largest_record);
    let max_retention = parse_duration(setting(&settings, "KEYFLIGHT_MAX_RETENTION")).unwrap();
    sized(
        "KEYFLIGHT_MAX_RETENTION (seconds)",
        max_retention.as_secs(),
        longest_retention.as_secs(),
    );
    let default_retention =
        parse_duration(setting(&settings, "KEYFLIGHT_DEFAULT_RETENTION")).unwrap();
    assert!(default_retention <= max_retention && default_retention > Duration::ZERO);

    // The filters pack batches of finalizes by their lease_store.max_body_bytes: the store
    // must accept exactly that, and a finalize of the largest record must fit.
    let max_body: u64 = setting(&settings, "KEYFLIGHT_MAX_BODY_BYTES")
        .parse()
        .unwrap();
    for (file, config) in &configs {
        assert_eq!(
            config.lease_store.max_body_bytes, max_body,
            "{file}: lease_store.max_body_bytes must be the store's KEYFLIGHT_MAX_BODY_BYTES"
        );
    }
    assert!(max_body >= finalize_bytes(largest_record));
}
