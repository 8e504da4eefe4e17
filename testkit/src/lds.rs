//! The listener served from a file (LDS), so a scenario can push a new plugin configuration
//! to a running Envoy the way a control plane (istiod) does.
//!
//! [`split`] turns a rendered static config into a bootstrap whose listener comes from
//! `dynamic_resources.lds_config.path_config_source`, and the listener itself as a discovery
//! response. Rewriting that file (atomically: Envoy watches the directory for a rename)
//! makes Envoy build a new listener with the new filter configuration and drain the old
//! one; the old plugin's root context is retired once the old listener is gone.

use std::path::Path;

use serde_json::{Value, json};

use crate::envoy_config::RenderError;

/// The `@type` of a listener resource in a discovery response.
const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";

/// A rendered config split into its bootstrap and its listener.
pub struct Split {
    /// The bootstrap, as JSON text (Envoy reads JSON in a `.yaml` file: JSON is YAML).
    pub bootstrap: String,
    /// The discovery response holding the listener, as JSON text.
    pub listeners: String,
}

/// Moves the (only) static listener of `rendered` into the LDS file `lds_path`.
pub fn split(rendered: &str, lds_path: &Path) -> Result<Split, RenderError> {
    let mut doc: Value = serde_yaml_ng::from_str(rendered)
        .map_err(|e| RenderError(format!("the rendered config is not YAML: {e}")))?;
    let listeners = doc
        .pointer_mut("/static_resources/listeners")
        .map(Value::take)
        .ok_or_else(|| RenderError("the rendered config has no static listeners".into()))?;
    if let Some(resources) = doc
        .pointer_mut("/static_resources")
        .and_then(Value::as_object_mut)
    {
        resources.remove("listeners");
    }
    let resources: Vec<Value> = listeners
        .as_array()
        .ok_or_else(|| RenderError("static_resources.listeners is not a list".into()))?
        .iter()
        .map(|listener| {
            let mut listener = listener.clone();
            listener["@type"] = json!(LISTENER_TYPE);
            listener
        })
        .collect();
    doc["node"] = json!({"id": "keyflight-e2e", "cluster": "keyflight-e2e"});
    doc["dynamic_resources"] = json!({
        "lds_config": {
            "path_config_source": {"path": lds_path.display().to_string()},
            "resource_api_version": "V3"
        }
    });
    Ok(Split {
        bootstrap: doc.to_string(),
        listeners: json!({ "resources": resources }).to_string(),
    })
}

/// Writes `contents` to `path` by renaming a sibling temp file over it, so Envoy's file
/// watcher never sees a half-written listener.
pub fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, contents)?;
    std::fs::rename(&temp, path)
}
