//! The two Envoys of the bench stack, both rendered from the shipped `envoy/demo.yaml`.
//!
//! * **guarded**: the shipped config as the e2e tests render it (ports, wasm path, plugin
//!   JSON: [`keyflight_testkit::envoy_config::render`]), the keyflight filter in front of the
//!   demo upstream;
//! * **plain**: the same rendering with the wasm filter taken out of the HTTP filter chain,
//!   plus a `direct_response` route at [`DIRECT_PATH`] that answers like a replay would.
//!
//! Everything else (listener, buffer limits, router, clusters, worker count) is the same on
//! both sides, so "plain" is what a user runs without keyflight and "guarded − plain" is what
//! keyflight costs. Each edit finds its anchor exactly once, like the e2e renderer, so a
//! drift in the shipped file fails loudly here instead of measuring something else.

use keyflight_testkit::yaml_lines;

use crate::error::BenchError;

/// The path the plain Envoy answers itself with `direct_response`.
pub const DIRECT_PATH: &str = "/direct";

/// The HTTP filter entry of the wasm filter (removed by [`without_filter`]).
const WASM_FILTER: &str = "- name: envoy.filters.http.wasm";

/// The HTTP filter entry that follows it.
const ROUTER_FILTER: &str = "- name: envoy.filters.http.router";

/// The catch-all route the direct route goes before.
const CATCH_ALL_ROUTE: &str = "- match: { prefix: \"/\" }";

/// `yaml` without the keyflight wasm filter.
pub fn without_filter(yaml: &str) -> Result<String, BenchError> {
    let lines: Vec<&str> = yaml.lines().collect();
    let start = anchor(&lines, WASM_FILTER)?;
    let end = anchor(&lines, ROUTER_FILTER)?;
    if end <= start {
        return Err(drift(&format!(
            "`{ROUTER_FILTER}` is not after `{WASM_FILTER}`"
        )));
    }
    let kept: Vec<&str> = lines[..start]
        .iter()
        .chain(&lines[end..])
        .copied()
        .collect();
    Ok(kept.join("\n") + "\n")
}

/// `yaml` with a route that answers at [`DIRECT_PATH`] itself with `status` and `body`.
///
/// Envoy answers a `direct_response` route from the request headers; with the body still
/// unread it must close an HTTP/1.1 connection after the answer (checked: every other
/// request then failed on a closed connection). The guarded path reads the whole body
/// before answering a replay, so the direct route gets the same: an
/// `envoy.filters.http.buffer` before the router, switched off on every other route so the
/// unguarded POST stays stock Envoy.
pub fn with_direct_response(yaml: &str, status: u16, body: &str) -> Result<String, BenchError> {
    // A JSON string is a valid YAML double-quoted scalar.
    let body = serde_json::to_string(body)
        .map_err(|e| BenchError::Input(format!("direct_response body: {e}")))?;
    let yaml = insert_at(
        yaml,
        CATCH_ALL_ROUTE,
        0,
        &[
            format!("- match: {{ prefix: \"{DIRECT_PATH}\" }}"),
            "  direct_response:".to_owned(),
            format!("    status: {status}"),
            format!("    body: {{ inline_string: {body} }}"),
        ],
    )?;
    // The catch-all route's match line is a list item: its keys sit two columns in.
    let yaml = insert_at(
        &yaml,
        CATCH_ALL_ROUTE,
        1,
        &[
            "  typed_per_filter_config:".to_owned(),
            "    envoy.filters.http.buffer:".to_owned(),
            "      \"@type\": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.BufferPerRoute"
                .to_owned(),
            "      disabled: true".to_owned(),
        ],
    )?;
    insert_at(
        &yaml,
        ROUTER_FILTER,
        0,
        &[
            "- name: envoy.filters.http.buffer".to_owned(),
            "  typed_config:".to_owned(),
            "    \"@type\": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer"
                .to_owned(),
            "    max_request_bytes: 1048576".to_owned(),
        ],
    )
}

/// `yaml_lines::insert_at`, with a drift reported as a bench input error.
fn insert_at(yaml: &str, at: &str, offset: usize, new: &[String]) -> Result<String, BenchError> {
    yaml_lines::insert_at(yaml, at, offset, new).map_err(|e| drift(&e.0))
}

/// `yaml_lines::anchor_line`, with a drift reported as a bench input error.
fn anchor(lines: &[&str], anchor: &str) -> Result<usize, BenchError> {
    yaml_lines::anchor_line(lines, anchor).map_err(|e| drift(&e.0))
}

fn drift(detail: &str) -> BenchError {
    BenchError::Input(format!("envoy/demo.yaml changed shape: {detail}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keyflight_testkit::envoy_config::shipped_demo_yaml;

    #[test]
    fn the_plain_config_has_no_wasm_filter_and_a_direct_route() {
        let shipped = shipped_demo_yaml();
        let plain = without_filter(&shipped).expect("the shipped config has the wasm filter");
        assert!(!plain.contains("envoy.filters.http.wasm"), "{plain}");
        assert!(!plain.contains("vm_config"), "{plain}");
        assert!(plain.contains(ROUTER_FILTER), "{plain}");
        let plain = with_direct_response(&plain, 201, r#"{"a":"b"}"#).expect("has the route");
        let direct = plain.find("prefix: \"/direct\"").expect("direct route");
        let catch_all = plain.find(CATCH_ALL_ROUTE).expect("catch-all route");
        assert!(
            direct < catch_all,
            "the direct route must match first:\n{plain}"
        );
        assert!(
            plain.contains(r#"inline_string: "{\"a\":\"b\"}""#),
            "{plain}"
        );
        assert!(
            without_filter(&plain).is_err(),
            "a second removal finds no filter"
        );
    }
}
