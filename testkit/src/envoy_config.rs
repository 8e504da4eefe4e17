//! Renders the Envoy configuration a test stack runs, from the shipped `envoy/*.yaml`.
//!
//! Tests must prove the config users run, so there is no second template: the shipped file
//! is rewritten in exactly three ways, each checked to apply exactly once (a drift in the
//! shipped file fails here, loudly, instead of testing something else):
//!
//! 1. the `port_value:` lines (listener, admin, every lease-store replica, upstream) get
//!    free ports;
//! 2. the wasm `filename:` becomes an absolute path;
//! 3. the plugin JSON block under `value: |` is replaced by the test's plugin configuration.
//!
//! Text substitution rather than a YAML round trip keeps the shipped comments and layout out
//! of the question, and needs no YAML library.
//!
//! A stack whose parts run in network namespaces ([`crate::net`]) moves each socket off
//! `127.0.0.1` afterwards ([`place`]): the same kind of edit, by its (now unique) port, also
//! checked to apply exactly once.
//!
//! Both Envoys of the two-replica set-up render from `envoy/two-replicas.yaml`, which lists
//! both lease-store replicas ([`render_from`], [`shipped_second_replica_ports`]); a unit test
//! checks it differs from `demo.yaml` in its listener and admin ports and one more
//! lease-store endpoint only. Scenarios that need another Envoy shape (jwt_authn, a TLS
//! listener, a short route timeout) edit the rendered text further with
//! [`crate::envoy_variants`].

use std::net::IpAddr;

use crate::yaml_lines::{indentation, replace_once};
use serde_json::Value;

/// The listener, admin, lease-store and upstream ports as `envoy/demo.yaml` ships them.
pub fn shipped_ports() -> Ports {
    Ports {
        listener: 10000,
        admin: 9901,
        lease_stores: vec![8480],
        upstream: 8081,
    }
}

/// The ports as `envoy/two-replicas.yaml` ships them (Envoy 2 of the two-replica set-up):
/// both lease-store replicas, the same upstream.
pub fn shipped_second_replica_ports() -> Ports {
    Ports {
        listener: 10001,
        admin: 9902,
        lease_stores: vec![8480, 8481],
        upstream: 8081,
    }
}

/// The wasm path as `envoy/demo.yaml` ships it (relative to the repository root).
pub const SHIPPED_WASM: &str = "target/wasm32-wasip1/release/keyflight_filter_wasm.wasm";

/// The native adapter's configs: `demo.yaml` and `two-replicas.yaml` with the dynamic
/// module in place of the Wasm filter, so they have no wasm path to rewrite.
pub const NATIVE_DEMO_YAML: &str = "native-demo.yaml";
/// See [`NATIVE_DEMO_YAML`].
pub const NATIVE_TWO_REPLICAS_YAML: &str = "native-two-replicas.yaml";

/// The line that opens the plugin JSON block.
const PLUGIN_BLOCK_MARKER: &str = "value: |";

/// The ports a rendered config uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    /// Envoy's listener (where tests send requests).
    pub listener: u16,
    /// Envoy's admin interface.
    pub admin: u16,
    /// The lease-store replicas (cluster `keyflight_lease_store`), in the order the shipped
    /// file lists them: as many as it lists.
    pub lease_stores: Vec<u16>,
    /// The demo upstream (cluster `demo_upstream`).
    pub upstream: u16,
}

impl Ports {
    /// The first lease-store replica (the only one of a single-replica config).
    pub fn lease_store(&self) -> u16 {
        self.lease_stores[0]
    }
}

/// The shipped `envoy/demo.yaml`.
pub fn shipped_demo_yaml() -> String {
    shipped_yaml("demo.yaml")
}

/// The shipped `envoy/two-replicas.yaml` (what both Envoys of the two-replica set-up run).
pub fn shipped_second_replica_yaml() -> String {
    shipped_yaml("two-replicas.yaml")
}

/// A shipped file under `envoy/`.
pub fn shipped_yaml(name: &str) -> String {
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

/// Renders the shipped config for `ports`: `envoy/demo.yaml` for one lease-store replica,
/// `envoy/two-replicas.yaml` for two (both Envoys of that set-up run it).
pub fn render_shipped(ports: &Ports, wasm: &str, plugin: &Value) -> Result<String, RenderError> {
    match ports.lease_stores.len() {
        1 => render(&shipped_demo_yaml(), ports, wasm, plugin),
        2 => render_from(
            &shipped_second_replica_yaml(),
            &shipped_second_replica_ports(),
            ports,
            wasm,
            plugin,
        ),
        n => Err(RenderError(format!(
            "the shipped configs run one or two lease-store replicas, not {n}"
        ))),
    }
}

/// Renders `yaml` (the shipped demo config) with other ports, wasm path and plugin JSON.
pub fn render(
    yaml: &str,
    ports: &Ports,
    wasm: &str,
    plugin: &Value,
) -> Result<String, RenderError> {
    render_from(yaml, &shipped_ports(), ports, wasm, plugin)
}

/// Renders a shipped config whose ports are `shipped` (see [`render`]).
pub fn render_from(
    yaml: &str,
    shipped: &Ports,
    ports: &Ports,
    wasm: &str,
    plugin: &Value,
) -> Result<String, RenderError> {
    render_parts(yaml, shipped, ports, Some(wasm), plugin)
}

/// Renders the native adapter's config for `ports` and `plugin`: `envoy/native-demo.yaml`
/// for one lease-store replica, `envoy/native-two-replicas.yaml` for two. The dynamic module
/// is found by name, so only the ports and the plugin JSON change.
pub fn render_native(ports: &Ports, plugin: &Value) -> Result<String, RenderError> {
    match ports.lease_stores.len() {
        2 => render_parts(
            &shipped_yaml(NATIVE_TWO_REPLICAS_YAML),
            &shipped_second_replica_ports(),
            ports,
            None,
            plugin,
        ),
        _ => render_parts(
            &shipped_yaml(NATIVE_DEMO_YAML),
            &shipped_ports(),
            ports,
            None,
            plugin,
        ),
    }
}

/// [`render_from`], with the wasm path rewritten only when given.
fn render_parts(
    yaml: &str,
    shipped: &Ports,
    ports: &Ports,
    wasm: Option<&str>,
    plugin: &Value,
) -> Result<String, RenderError> {
    if shipped.lease_stores.len() != ports.lease_stores.len() {
        return Err(RenderError(format!(
            "the shipped config lists {} lease-store replica(s), the stack has {}",
            shipped.lease_stores.len(),
            ports.lease_stores.len()
        )));
    }
    let stores = shipped.lease_stores.iter().zip(&ports.lease_stores);
    let mut text = yaml.to_owned();
    for (shipped, port) in [
        (&shipped.listener, &ports.listener),
        (&shipped.admin, &ports.admin),
        (&shipped.upstream, &ports.upstream),
    ]
    .into_iter()
    .chain(stores)
    {
        text = replace_once(
            &text,
            &format!("port_value: {shipped} "),
            &format!("port_value: {port} "),
        )?;
    }
    if let Some(wasm) = wasm {
        text = replace_once(
            &text,
            &format!("filename: {SHIPPED_WASM}"),
            &format!("filename: {wasm}"),
        )?;
    }

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

/// Moves the socket on `port` (a listener, the admin interface or a cluster endpoint of a
/// rendered config) from `127.0.0.1` to `ip`: for a part in its own network namespace.
/// An error unless exactly one socket has that port.
pub fn place(yaml: &str, port: u16, ip: IpAddr) -> Result<String, RenderError> {
    replace_once(
        yaml,
        &format!("address: 127.0.0.1, port_value: {port} "),
        &format!("address: {ip}, port_value: {port} "),
    )
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

    fn ports(lease_stores: &[u16]) -> Ports {
        Ports {
            listener: 1,
            admin: 2,
            lease_stores: lease_stores.to_vec(),
            upstream: 4,
        }
    }

    #[test]
    fn the_shipped_demo_config_renders_with_new_ports_wasm_and_plugin() {
        let yaml = shipped_demo_yaml();
        let mut plugin = shipped_plugin_config(&yaml).expect("the shipped plugin JSON parses");
        assert_eq!(plugin["policies"][0]["name"], "payments");
        plugin["policies"][0]["require_key"] = Value::Bool(true);
        let ports = Ports {
            listener: 20001,
            admin: 20002,
            lease_stores: vec![20003],
            upstream: 20004,
        };
        let rendered =
            render(&yaml, &ports, "/abs/filter.wasm", &plugin).expect("the shipped config renders");

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
    fn the_two_replica_config_is_the_demo_config_with_a_second_lease_store() {
        let strip_comments = |yaml: &str| -> Vec<String> {
            yaml.lines()
                .filter(|line| !line.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        let plugin = shipped_plugin_config(&shipped_demo_yaml()).expect("demo plugin JSON");
        let demo =
            render(&shipped_demo_yaml(), &ports(&[3]), "/x.wasm", &plugin).expect("demo renders");
        let two = render_from(
            &shipped_second_replica_yaml(),
            &shipped_second_replica_ports(),
            &ports(&[3, 5]),
            "/x.wasm",
            &plugin,
        )
        .expect("two-replicas.yaml renders");

        // The second store's endpoint is three lines: `- endpoint:`, `address:`, the socket.
        let mut lines = strip_comments(&two);
        let socket = lines
            .iter()
            .position(|line| line.contains("port_value: 5 "))
            .expect("the second lease-store endpoint");
        assert!(
            lines[socket - 2].trim() == "- endpoint:" && lines[socket - 1].trim() == "address:",
            "the second lease-store is an endpoint of its own:\n{two}"
        );
        lines.drain(socket - 2..=socket);
        assert_eq!(
            lines,
            strip_comments(&demo),
            "envoy/two-replicas.yaml drifted from envoy/demo.yaml beyond its ports and second store"
        );
    }

    /// A config's lines without its comments, its keyflight filter and its plugin JSON (up
    /// to the router, which follows them).
    fn outside_the_filter(yaml: &str) -> Vec<String> {
        let lines: Vec<&str> = yaml.lines().filter(|l| !l.starts_with('#')).collect();
        let filter = lines
            .iter()
            .position(|l| l.trim_start().starts_with("- name: envoy.filters.http."))
            .expect("the keyflight filter");
        let router = lines
            .iter()
            .position(|l| l.contains("- name: envoy.filters.http.router"))
            .expect("the router");
        lines[..filter]
            .iter()
            .chain(&lines[router..])
            .map(|l| (*l).to_owned())
            .collect()
    }

    #[test]
    fn the_native_configs_are_the_wasm_ones_with_the_dynamic_module_for_the_wasm_filter() {
        for (wasm, native) in [
            ("demo.yaml", NATIVE_DEMO_YAML),
            ("two-replicas.yaml", NATIVE_TWO_REPLICAS_YAML),
        ] {
            let (wasm_yaml, native_yaml) = (shipped_yaml(wasm), shipped_yaml(native));
            assert_eq!(
                outside_the_filter(&native_yaml),
                outside_the_filter(&wasm_yaml),
                "envoy/{native} drifted from envoy/{wasm} beyond the filter's own lines"
            );
            assert_eq!(
                shipped_plugin_config(&native_yaml).expect("native plugin JSON"),
                shipped_plugin_config(&wasm_yaml).expect("wasm plugin JSON"),
                "envoy/{native} and envoy/{wasm} hand the filter different plugin JSON"
            );
            // The Wasm filter's counter names (`docs/envoy-facts.md#dynamic-modules`).
            assert!(
                native_yaml.contains("metrics_namespace: wasmcustom\n"),
                "envoy/{native} files the counters under another namespace than the Wasm filter's"
            );
        }

        let plugin = serde_json::json!({"lease_store": {"cluster": "c"}});
        for stores in [&[3][..], &[3, 5]] {
            let rendered = render_native(&ports(stores), &plugin).expect("a native config renders");
            for port in stores {
                assert!(
                    rendered.contains(&format!("port_value: {port} ")),
                    "{rendered}"
                );
            }
            assert!(
                rendered.contains("name: keyflight_filter_native"),
                "{rendered}"
            );
            assert_eq!(
                shipped_plugin_config(&rendered).expect("rendered JSON"),
                plugin
            );
        }
    }

    /// `envoy/two-replicas.yaml` rendered with the demo plugin for `stores`.
    fn two_replicas(stores: &[u16]) -> Result<String, RenderError> {
        let plugin = shipped_plugin_config(&shipped_demo_yaml()).expect("demo plugin JSON");
        render_from(
            &shipped_second_replica_yaml(),
            &shipped_second_replica_ports(),
            &ports(stores),
            "/x.wasm",
            &plugin,
        )
    }

    #[test]
    fn both_lease_store_replicas_are_rendered_into_the_two_replica_config() {
        let two = two_replicas(&[23, 25]).expect("two-replicas.yaml renders");
        for port in [23, 25] {
            assert!(two.contains(&format!("port_value: {port} ")), "{two}");
        }
        let error = two_replicas(&[23]).expect_err("one store for a two-store config is refused");
        assert!(error.0.contains("2 lease-store replica(s)"), "{error}");
    }

    #[test]
    fn each_socket_is_placed_on_its_address_once() {
        let two = two_replicas(&[23, 25]).expect("two-replicas.yaml renders");
        let ip: IpAddr = "10.213.0.12".parse().expect("an address");
        let placed = place(&two, 25, ip).expect("the second store's socket");
        assert!(
            placed.contains("{ address: 10.213.0.12, port_value: 25 }"),
            "{placed}"
        );
        assert_eq!(placed.matches("10.213.0.12").count(), 1, "{placed}");
        let error = place(&placed, 25, ip).expect_err("placed already");
        assert!(error.0.contains("found it 0 times"), "{error}");
        let twice = format!("{two}{two}");
        assert!(
            place(&twice, 23, ip).is_err(),
            "a port named twice is refused"
        );
    }

    #[test]
    fn a_config_without_the_expected_shape_is_refused() {
        let plugin = Value::Null;
        let error = render("admin: {}\n", &ports(&[3]), "/x.wasm", &plugin)
            .expect_err("a config without ports is refused");
        assert!(error.0.contains("port_value: 10000"), "{error}");
    }
}
