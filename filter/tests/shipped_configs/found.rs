//! Where the shipped plugin configurations are, and how they are read.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The `@type` of Envoy's Wasm HTTP filter configuration.
pub(crate) const WASM_FILTER_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";

/// One plugin configuration found in a shipped file.
#[derive(Debug)]
pub(crate) struct Found {
    /// File it came from, relative to the workspace root.
    pub(crate) file: PathBuf,
    /// The plugin JSON, as text.
    pub(crate) json: String,
    /// The Wasm filter's typed config around it (`None` for WasmPlugin, EnvoyExtensionPolicy
    /// and doc JSON).
    pub(crate) wasm_filter: Option<Value>,
    /// The Kubernetes object it sits in, if any (for labels and sibling patches).
    pub(crate) object: Option<Value>,
}

pub(crate) use keyflight_testkit::shipped::{files_under, workspace_root, yaml_documents};

/// Collects the plugin configurations inside one YAML document.
pub(crate) fn collect_from_document(file: &Path, doc: &Value, out: &mut Vec<Found>) {
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
    // Envoy Gateway hands each dynamic module's `config` to the module as JSON text.
    if doc.get("kind").and_then(Value::as_str) == Some("EnvoyExtensionPolicy") {
        let modules = doc.pointer("/spec/dynamicModule").and_then(Value::as_array);
        for module in modules.into_iter().flatten() {
            let config = module
                .get("config")
                .unwrap_or_else(|| panic!("{}: a dynamicModule without config", file.display()));
            out.push(Found {
                file: file.to_owned(),
                json: config.to_string(),
                wasm_filter: None,
                object: Some(doc.clone()),
            });
        }
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
pub(crate) fn wasm_filters<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
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
pub(crate) fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
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

pub(crate) fn collect_from_markdown(file: &Path, text: &str, out: &mut Vec<Found>) {
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
pub(crate) fn shipped() -> Vec<Found> {
    let root = workspace_root();
    let mut found = Vec::new();
    for (rel, doc) in shipped_objects() {
        collect_from_document(&rel, &doc, &mut found);
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

/// Every YAML document shipped under `envoy/` and `deploy/` (Kubernetes objects and Envoy
/// bootstraps), with its file relative to the workspace root.
pub(crate) fn shipped_objects() -> Vec<(PathBuf, Value)> {
    let root = workspace_root();
    let mut out = Vec::new();
    for dir in ["envoy", "deploy"] {
        for path in files_under(&root.join(dir), &[".yaml", ".yml"]) {
            let text = std::fs::read_to_string(&path).expect("readable file");
            let rel = path.strip_prefix(&root).expect("under the root").to_owned();
            out.extend(
                yaml_documents(&text, &rel)
                    .into_iter()
                    .map(|doc| (rel.clone(), doc)),
            );
        }
    }
    out
}

pub(crate) fn is_istio(found: &Found) -> bool {
    found.file.starts_with("envoy/istio")
}
