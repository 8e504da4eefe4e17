//! Renders the Envoy configuration a test stack runs, from the shipped `envoy/demo.yaml`.
//!
//! Tests must prove the config users run, so there is no second template: the shipped file
//! is rewritten in exactly three ways, each checked to apply exactly once (a drift in the
//! shipped file fails here, loudly, instead of testing something else):
//!
//! 1. the four `port_value:` lines (listener, admin, lease-store, upstream) get free ports;
//! 2. the wasm `filename:` becomes an absolute path;
//! 3. the plugin JSON block under `value: |` is replaced by the test's plugin configuration.
//!
//! Text substitution rather than a YAML round trip keeps the shipped comments and layout out
//! of the question, and needs no YAML library.
//!
//! The second replica of the two-replica set-up (`envoy/two-replicas.yaml`) renders the same
//! way from its own shipped ports ([`render_from`], [`SHIPPED_SECOND_REPLICA_PORTS`]); a unit
//! test checks it differs from `demo.yaml` in those ports only. Scenarios that need another
//! Envoy shape (jwt_authn, a TLS listener, a short route timeout) edit the rendered text
//! further with [`crate::envoy_variants`].

use crate::yaml_lines::{indentation, replace_once};
use serde_json::Value;

/// The listener, admin, lease-store and upstream ports as `envoy/demo.yaml` ships them.
pub const SHIPPED_PORTS: Ports = Ports {
    listener: 10000,
    admin: 9901,
    lease_store: 8480,
    upstream: 8081,
};

/// The ports as `envoy/two-replicas.yaml` (the second replica) ships them: the same upstream.
pub const SHIPPED_SECOND_REPLICA_PORTS: Ports = Ports {
    listener: 10001,
    admin: 9902,
    lease_store: 8481,
    upstream: 8081,
};

/// The wasm path as `envoy/demo.yaml` ships it (relative to the repository root).
pub const SHIPPED_WASM: &str = "target/wasm32-wasip1/release/keyflight_filter.wasm";

/// The line that opens the plugin JSON block.
const PLUGIN_BLOCK_MARKER: &str = "value: |";

/// The ports a rendered config uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// Envoy's listener (where tests send requests).
    pub listener: u16,
    /// Envoy's admin interface.
    pub admin: u16,
    /// The lease-store (cluster `keyflight_lease_store`).
    pub lease_store: u16,
    /// The demo upstream (cluster `demo_upstream`).
    pub upstream: u16,
}

/// The shipped `envoy/demo.yaml`.
pub fn shipped_demo_yaml() -> String {
    shipped_yaml("demo.yaml")
}

/// The shipped `envoy/two-replicas.yaml` (the second replica; the first is `demo.yaml`).
pub fn shipped_second_replica_yaml() -> String {
    shipped_yaml("two-replicas.yaml")
}

fn shipped_yaml(name: &str) -> String {
    let path = crate::binaries::workspace_root().join("envoy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The plugin configuration JSON that `envoy/demo.yaml` ships.
pub fn shipped_plugin_config(yaml: &str) -> Result<Value, RenderError> {
    let block = plugin_block(yaml)?;
    let text: String = yaml
        .lines()
        .skip(block.first_line)
        .take(block.line_count)
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&text)
        .map_err(|e| RenderError(format!("the plugin JSON block is not JSON: {e}")))
}

/// Renders `yaml` (the shipped demo config) with other ports, wasm path and plugin JSON.
pub fn render(yaml: &str, ports: Ports, wasm: &str, plugin: &Value) -> Result<String, RenderError> {
    render_from(yaml, SHIPPED_PORTS, ports, wasm, plugin)
}

/// Renders a shipped config whose ports are `shipped` (see [`render`]).
pub fn render_from(
    yaml: &str,
    shipped: Ports,
    ports: Ports,
    wasm: &str,
    plugin: &Value,
) -> Result<String, RenderError> {
    let mut text = yaml.to_owned();
    for (shipped, port) in [
        (shipped.listener, ports.listener),
        (shipped.admin, ports.admin),
        (shipped.lease_store, ports.lease_store),
        (shipped.upstream, ports.upstream),
    ] {
        text = replace_once(
            &text,
            &format!("port_value: {shipped} "),
            &format!("port_value: {port} "),
        )?;
    }
    text = replace_once(
        &text,
        &format!("filename: {SHIPPED_WASM}"),
        &format!("filename: {wasm}"),
    )?;

    let block = plugin_block(&text)?;
    let pretty = serde_json::to_string_pretty(plugin)
        .map_err(|e| RenderError(format!("serialize the plugin JSON: {e}")))?;
    let indent = " ".repeat(block.indent);
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines[..block.first_line]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    out.extend(pretty.lines().map(|line| format!("{indent}{line}")));
    out.extend(
        lines[block.first_line + block.line_count..]
            .iter()
            .map(|l| (*l).to_owned()),
    );
    Ok(out.join("\n") + "\n")
}

/// Where the plugin JSON block sits: its first line, how many lines, and their indentation.
struct Block {
    first_line: usize,
    line_count: usize,
    indent: usize,
}

fn plugin_block(yaml: &str) -> Result<Block, RenderError> {
    let lines: Vec<&str> = yaml.lines().collect();
    let markers: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.trim() == PLUGIN_BLOCK_MARKER)
        .map(|(index, _)| index)
        .collect();
    let [marker] = markers[..] else {
        return Err(RenderError(format!(
            "expected exactly one `{PLUGIN_BLOCK_MARKER}` line (the plugin JSON), found {}",
            markers.len()
        )));
    };
    let marker_indent = indentation(lines[marker]);
    let first_line = marker + 1;
    // A YAML block scalar runs while lines are blank or indented deeper than its key.
    let line_count = lines[first_line..]
        .iter()
        .take_while(|line| line.trim().is_empty() || indentation(line) > marker_indent)
        .count();
    // Trailing blank lines belong to what follows.
    let line_count = lines[first_line..first_line + line_count]
        .iter()
        .rposition(|line| !line.trim().is_empty())
        .map_or(0, |last| last + 1);
    if line_count == 0 {
        return Err(RenderError("the plugin JSON block is empty".into()));
    }
    Ok(Block {
        first_line,
        line_count,
        indent: indentation(lines[first_line]),
    })
}

/// The shipped config no longer has the shape the renderer relies on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot render the shipped Envoy config: {0}")]
pub struct RenderError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_demo_config_renders_with_new_ports_wasm_and_plugin() {
        let yaml = shipped_demo_yaml();
        let mut plugin = shipped_plugin_config(&yaml).expect("the shipped plugin JSON parses");
        assert_eq!(plugin["policies"][0]["name"], "payments");
        plugin["policies"][0]["require_key"] = Value::Bool(true);
        let ports = Ports {
            listener: 20001,
            admin: 20002,
            lease_store: 20003,
            upstream: 20004,
        };
        let rendered =
            render(&yaml, ports, "/abs/filter.wasm", &plugin).expect("the shipped config renders");

        for port in [20001, 20002, 20003, 20004] {
            assert!(
                rendered.contains(&format!("port_value: {port} ")),
                "port {port}:\n{rendered}"
            );
        }
        for port in [10000, 9901, 8480, 8081] {
            assert!(
                !rendered.contains(&format!("port_value: {port} ")),
                "port {port} left:\n{rendered}"
            );
        }
        assert!(rendered.contains("filename: /abs/filter.wasm"));
        assert_eq!(
            shipped_plugin_config(&rendered).expect("the rendered plugin JSON parses"),
            plugin
        );
        // What follows the block is intact.
        assert!(rendered.contains("envoy.filters.http.router"));
    }

    #[test]
    fn the_second_replica_is_the_demo_config_with_three_other_ports() {
        let strip_comments = |yaml: &str| -> Vec<String> {
            yaml.lines()
                .filter(|line| !line.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        let plugin = shipped_plugin_config(&shipped_demo_yaml()).expect("demo plugin JSON");
        let ports = Ports {
            listener: 1,
            admin: 2,
            lease_store: 3,
            upstream: 4,
        };
        let demo = render(&shipped_demo_yaml(), ports, "/x.wasm", &plugin).expect("demo renders");
        let second = render_from(
            &shipped_second_replica_yaml(),
            SHIPPED_SECOND_REPLICA_PORTS,
            ports,
            "/x.wasm",
            &plugin,
        )
        .expect("two-replicas.yaml renders");
        assert_eq!(
            strip_comments(&second),
            strip_comments(&demo),
            "envoy/two-replicas.yaml drifted from envoy/demo.yaml beyond its ports"
        );
    }

    #[test]
    fn a_config_without_the_expected_shape_is_refused() {
        let plugin = Value::Null;
        let ports = Ports {
            listener: 1,
            admin: 2,
            lease_store: 3,
            upstream: 4,
        };
        let error = render("admin: {}\n", ports, "/x.wasm", &plugin)
            .expect_err("a config without ports is refused");
        assert!(error.0.contains("port_value: 10000"), "{error}");
    }
}
