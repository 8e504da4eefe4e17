//! The files keyflight ships (Envoy configs, Kubernetes manifests, docs), found and read
//! the same way by every test that holds them to a rule.

use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_json::Value;

/// Vendored third-party data (Istio's CRDs), not configuration keyflight ships.
pub const VENDORED: &str = "deploy/checks/schemas";

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the testkit crate sits in the workspace")
        .to_owned()
}

/// Files under `dir` (recursively) whose name ends with one of `extensions`, sorted;
/// [`VENDORED`] is left out, and a missing `dir` has none.
pub fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        if path.ends_with(VENDORED) {
            continue;
        }
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

/// Every YAML document in `text` (read from `origin`), as JSON values, empty documents
/// skipped; panics naming `origin` on invalid YAML.
pub fn yaml_documents(text: &str, origin: &Path) -> Vec<Value> {
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
