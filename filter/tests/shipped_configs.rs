//! Every plugin configuration keyflight ships is one the filter accepts.
//!
//! Operators copy these files verbatim, and a configuration the filter refuses fails plugin
//! start, which under `FAIL_CLOSED` is an outage of every guarded route. So every plugin JSON
//! in the repository goes through the filter's own validator ([`parse_plugin_config`]), the
//! same code `on_configure` runs.
//!
//! Where plugin configurations are found (relative to the workspace root):
//!
//! * YAML files under `envoy/` and `deploy/` (Envoy bootstraps, Istio `EnvoyFilter`s): every
//!   mapping whose `@type` is the Envoy Wasm HTTP filter, wherever it sits in the tree; its
//!   `config.configuration.value` is the plugin JSON (a `google.protobuf.StringValue`).
//! * Istio `WasmPlugin` objects in those files: `spec.pluginConfig`.
//! * Markdown under `envoy/` and `deploy/`, and the root `README.md`: fenced ```` ```json ````
//!   blocks whose top-level object has a `lease_store` key (that key makes it a plugin
//!   configuration), and fenced ```` ```yaml ```` blocks, searched like the YAML files.
//!   Annotated illustrations that are not meant to be valid JSON (with `//` comments) use
//!   ```` ```jsonc ```` and are not checked.
//!
//! Besides acceptance, the Istio manifests are held to what FIELD-NOTES requires: the Wasm
//! filter holds headers (`allow_on_headers_stop_iteration`), fails closed, reaches the store
//! through an Istio-named cluster, and each rollout stage's `keyflight.io/mode` label says
//! the mode its plugin runs in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyflight_filter::config::Mode;
use keyflight_filter::parse_plugin_config;
use serde_json::Value;

/// The `@type` of Envoy's Wasm HTTP filter configuration.
const WASM_FILTER_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";

/// One plugin configuration found in a shipped file.
#[derive(Debug)]
struct Found {
    /// File it came from, relative to the workspace root.
    file: PathBuf,
    /// The plugin JSON, as text.
    json: String,
    /// The Wasm filter's typed config around it (`None` for WasmPlugin and doc JSON).
    wasm_filter: Option<Value>,
    /// The Kubernetes object it sits in, if any (for labels and sibling patches).
    object: Option<Value>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the filter crate sits in the workspace")
        .to_owned()
}

/// Files under `dir` (recursively) whose name ends with one of `extensions`, sorted.
fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        if path.is_dir() {
            out.extend(files_under(&path, extensions));
        } else if extensions
            .iter()
            .any(|ext| path.to_string_lossy().ends_with(ext))
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Every YAML document in `text`, as JSON values (empty documents skipped).
fn yaml_documents(text: &str, origin: &Path) -> Vec<Value> {
    use serde::Deserialize as _;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| {
            let yaml = serde_yaml_ng::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: invalid YAML: {e}", origin.display()));
            serde_json::to_value(yaml).unwrap_or_else(|e| {
                panic!("{}: YAML not representable as JSON: {e}", origin.display())
            })
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

/// Collects the plugin configurations inside one YAML document.
fn collect_from_document(file: &Path, doc: &Value, out: &mut Vec<Found>) {
    if doc.get("kind").and_then(Value::as_str) == Some("WasmPlugin") {
        let config = doc
            .pointer("/spec/pluginConfig")
            .unwrap_or_else(|| panic!("{}: WasmPlugin without spec.pluginConfig", file.display()));
        out.push(Found {
            file: file.to_owned(),
            json: config.to_string(),
            wasm_filter: None,
            object: Some(doc.clone()),
        });
    }
    let mut filters = Vec::new();
    wasm_filters(doc, &mut filters);
    for filter in filters {
        let json = filter
            .pointer("/config/configuration/value")
            .and_then(Value::as_str)
            .unwrap_or_else(|| {
                panic!(
                    "{}: Wasm filter without a StringValue config.configuration.value",
                    file.display()
                )
            });
        out.push(Found {
            file: file.to_owned(),
            json: json.to_owned(),
            wasm_filter: Some(filter.clone()),
            object: doc.get("kind").map(|_| doc.clone()),
        });
    }
}

/// Every mapping in the tree whose `@type` is the Envoy Wasm HTTP filter.
fn wasm_filters<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Object(map) => {
            if map.get("@type").and_then(Value::as_str) == Some(WASM_FILTER_TYPE) {
                out.push(value);
            }
            map.values().for_each(|v| wasm_filters(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| wasm_filters(v, out)),
        _ => {}
    }
}

/// Fenced code blocks of a Markdown text: (info string, body).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((info.trim().to_owned(), String::new()));
                }
            }
            Some((info, mut body)) => {
                if trimmed.starts_with("```") {
                    blocks.push((info, body));
                } else {
                    body.push_str(line);
                    body.push('\n');
                    open = Some((info, body));
                }
            }
        }
    }
    blocks
}

fn collect_from_markdown(file: &Path, text: &str, out: &mut Vec<Found>) {
    for (info, body) in fenced_blocks(text) {
        match info.split_whitespace().next().unwrap_or("") {
            "json" => {
                let Ok(value) = serde_json::from_str::<Value>(&body) else {
                    assert!(
                        !body.contains("\"lease_store\""),
                        "{}: a ```json block mentions lease_store but is not valid JSON \
                         (use ```jsonc for annotated illustrations):\n{body}",
                        file.display()
                    );
                    continue;
                };
                if value.get("lease_store").is_some() {
                    out.push(Found {
                        file: file.to_owned(),
                        json: body,
                        wasm_filter: None,
                        object: None,
                    });
                }
            }
            "yaml" | "yml" => {
                for doc in yaml_documents(&body, file) {
                    collect_from_document(file, &doc, out);
                }
            }
            _ => {}
        }
    }
}

/// Every plugin configuration shipped in the repository.
fn shipped() -> Vec<Found> {
    let root = workspace_root();
    let mut found = Vec::new();
    for dir in ["envoy", "deploy"] {
        for path in files_under(&root.join(dir), &[".yaml", ".yml"]) {
            let text = std::fs::read_to_string(&path).expect("readable file");
            let rel = path.strip_prefix(&root).expect("under the root").to_owned();
            for doc in yaml_documents(&text, &rel) {
                collect_from_document(&rel, &doc, &mut found);
            }
        }
    }
    let mut docs = files_under(&root.join("envoy"), &[".md"]);
    docs.extend(files_under(&root.join("deploy"), &[".md"]));
    docs.push(root.join("README.md"));
    for path in docs {
        let text = std::fs::read_to_string(&path).expect("readable file");
        let rel = path.strip_prefix(&root).expect("under the root").to_owned();
        collect_from_markdown(&rel, &text, &mut found);
    }
    found
}

fn is_istio(found: &Found) -> bool {
    found.file.starts_with("envoy/istio")
}

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
