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

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

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

/// Vendored third-party data (Istio's CRDs), not configuration keyflight ships.
const VENDORED: &str = "deploy/checks/schemas";

/// Files under `dir` (recursively) whose name ends with one of `extensions`, sorted;
/// [`VENDORED`] is left out.
fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
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

// ----- router retries (F15) --------------------------------------------------------------
//
// A route's retry policy resends a request inside one stream, after keyflight's claim and
// unseen by it: a shipped guarded route may only retry where the request never reached the
// upstream (envoy/README.md, "Router retries"). The filter also caps guarded requests at
// zero retries by default; this keeps the shipped routes right for `router_retries: route`,
// `dry_run` and a filter that is not there yet.

/// Envoy retry conditions under which the request never reached the upstream.
const SAFE_RETRY_ON: [&str; 3] = ["connect-failure", "refused-stream", "reset-before-request"];

/// The `@type` of Envoy's HTTP connection manager.
const HCM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// Request headers through which a route could add retry conditions of its own.
const RETRY_HEADERS: [&str; 2] = ["x-envoy-retry-on", "x-envoy-retry-grpc-on"];

/// What the retry check looked at and what it refused.
#[derive(Debug, Default)]
struct RetryCheck {
    /// Every retry policy or VirtualService route checked.
    checked: Vec<String>,
    /// Why a checked place may resend a request the upstream already received.
    violations: Vec<String>,
}

impl RetryCheck {
    /// `retry_on` of an Envoy `RetryPolicy` at `at`.
    fn envoy_retry_policy(&mut self, at: &str, policy: &Value) {
        self.checked.push(at.to_owned());
        let retry_on = policy.get("retry_on").and_then(Value::as_str).unwrap_or("");
        for condition in retry_on.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !SAFE_RETRY_ON.contains(&condition) {
                self.violations.push(format!(
                    "{at}.retry_on: `{condition}` may resend a request the upstream already received"
                ));
            }
        }
    }

    /// The retry-related fields of a route or virtual host at `at`.
    fn envoy_route_level(&mut self, at: &str, level: &Value, action: Option<&Value>) {
        for holder in [Some(level), action].into_iter().flatten() {
            if let Some(policy) = holder.get("retry_policy") {
                self.envoy_retry_policy(&format!("{at}.retry_policy"), policy);
            }
            if holder.pointer("/hedge_policy/hedge_on_per_try_timeout") == Some(&Value::Bool(true))
            {
                self.violations.push(format!(
                    "{at}.hedge_policy: hedging sends a second attempt while the first runs"
                ));
            }
        }
        self.added_retry_headers(at, level);
    }

    fn added_retry_headers(&mut self, at: &str, level: &Value) {
        let added = level
            .get("request_headers_to_add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for option in added {
            let name = option
                .pointer("/header/key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_ascii_lowercase();
            if RETRY_HEADERS.contains(&name.as_str()) {
                self.violations.push(format!(
                    "{at}.request_headers_to_add: `{name}` adds retry conditions to the route"
                ));
            }
        }
    }

    /// The routes of an HTTP connection manager that runs the keyflight filter.
    fn connection_manager(&mut self, at: &str, hcm: &Value) {
        let filters = hcm.get("http_filters").and_then(Value::as_array);
        let guarding: Vec<&str> = filters
            .into_iter()
            .flatten()
            .filter(|f| {
                f.pointer("/typed_config/@type").and_then(Value::as_str) == Some(WASM_FILTER_TYPE)
            })
            .filter_map(|f| f.get("name").and_then(Value::as_str))
            .collect();
        if guarding.is_empty() {
            return;
        }
        let Some(route_config) = hcm.get("route_config") else {
            self.violations.push(format!(
                "{at}: a guarded connection manager without an inline route_config: its retries cannot be checked"
            ));
            return;
        };
        self.added_retry_headers(&format!("{at}.route_config"), route_config);
        let hosts = route_config.get("virtual_hosts").and_then(Value::as_array);
        for (v, host) in hosts.into_iter().flatten().enumerate() {
            let host_at = format!("{at}.route_config.virtual_hosts[{v}]");
            self.envoy_route_level(&host_at, host, None);
            let routes = host.get("routes").and_then(Value::as_array);
            for (r, route) in routes.into_iter().flatten().enumerate() {
                let disabled = guarding.iter().all(|name| {
                    route.pointer(&format!("/typed_per_filter_config/{name}/disabled"))
                        == Some(&Value::Bool(true))
                });
                if !disabled {
                    self.envoy_route_level(
                        &format!("{host_at}.routes[{r}]"),
                        route,
                        route.get("route"),
                    );
                }
            }
        }
    }

    /// An Istio VirtualService: every HTTP route needs a `retries` stanza, since without
    /// one Istio applies its default (`…,unavailable,cancelled,retriable-status-codes`, 503).
    fn virtual_service(&mut self, at: &str, service: &Value) {
        let routes = service.pointer("/spec/http").and_then(Value::as_array);
        for (i, route) in routes.into_iter().flatten().enumerate() {
            let at = format!("{at}.spec.http[{i}]");
            self.checked.push(at.clone());
            let Some(retries) = route.get("retries") else {
                self.violations.push(format!(
                    "{at}: no `retries`: Istio's default resends on the upstream's 503 and gRPC UNAVAILABLE/CANCELLED"
                ));
                continue;
            };
            if retries.get("attempts").and_then(Value::as_i64).unwrap_or(0) <= 0 {
                continue;
            }
            let Some(retry_on) = retries.get("retryOn").and_then(Value::as_str) else {
                self.violations.push(format!(
                    "{at}.retries: attempts without `retryOn` keep Istio's default conditions"
                ));
                continue;
            };
            for condition in retry_on.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if !SAFE_RETRY_ON.contains(&condition) {
                    self.violations.push(format!(
                        "{at}.retries.retryOn: `{condition}` may resend a request the upstream already received"
                    ));
                }
            }
        }
    }

    /// One YAML document: a VirtualService, or anything holding connection managers
    /// (Envoy bootstraps), or route fields inside an EnvoyFilter's patches.
    fn document(&mut self, at: &str, doc: &Value) {
        match doc.get("kind").and_then(Value::as_str) {
            Some("VirtualService") => self.virtual_service(at, doc),
            Some("EnvoyFilter") => {
                let patches = doc.pointer("/spec/configPatches").and_then(Value::as_array);
                for (i, patch) in patches.into_iter().flatten().enumerate() {
                    if let Some(value) = patch.pointer("/patch/value") {
                        let at = format!("{at}.spec.configPatches[{i}].patch.value");
                        self.envoy_route_level(&at, value, value.get("route"));
                    }
                }
            }
            _ => self.walk(at, doc),
        }
    }

    fn walk(&mut self, at: &str, value: &Value) {
        match value {
            Value::Object(map) => {
                if map.get("@type").and_then(Value::as_str) == Some(HCM_TYPE) {
                    self.connection_manager(at, value);
                }
                for (key, child) in map {
                    self.walk(&format!("{at}.{key}"), child);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    self.walk(&format!("{at}[{i}]"), child);
                }
            }
            _ => {}
        }
    }
}

/// The retry check over every YAML document shipped under `envoy/` and `deploy/`, and the
/// ```` ```yaml ```` blocks of their Markdown (a documented stanza is shipped too).
fn shipped_retry_check() -> RetryCheck {
    let root = workspace_root();
    let mut check = RetryCheck::default();
    for dir in ["envoy", "deploy"] {
        for path in files_under(&root.join(dir), &[".yaml", ".yml"]) {
            let rel = path.strip_prefix(&root).expect("under the root").to_owned();
            let text = std::fs::read_to_string(&path).expect("readable file");
            for (d, doc) in yaml_documents(&text, &rel).iter().enumerate() {
                check.document(&format!("{}#{d}", rel.display()), doc);
            }
        }
        for path in files_under(&root.join(dir), &[".md"]) {
            let rel = path.strip_prefix(&root).expect("under the root").to_owned();
            let text = std::fs::read_to_string(&path).expect("readable file");
            for (b, (info, body)) in fenced_blocks(&text).into_iter().enumerate() {
                if matches!(info.split_whitespace().next(), Some("yaml" | "yml")) {
                    for (d, doc) in yaml_documents(&body, &rel).iter().enumerate() {
                        check.document(&format!("{} block {b}#{d}", rel.display()), doc);
                    }
                }
            }
        }
    }
    check
}

/// The retry check of one YAML text.
fn retry_check_of(yaml: &str) -> RetryCheck {
    let mut check = RetryCheck::default();
    for (d, doc) in yaml_documents(yaml, Path::new("inline")).iter().enumerate() {
        check.document(&format!("inline#{d}"), doc);
    }
    check
}

#[test]
fn shipped_guarded_routes_retry_only_where_the_request_never_reached_the_upstream() {
    let check = shipped_retry_check();
    assert!(
        check.violations.is_empty(),
        "unsafe router retries on shipped guarded routes:\n{}",
        check.violations.join("\n")
    );
    // Guards the search: the demo routes and the Istio gateway route were looked at.
    for file in [
        "envoy/demo.yaml",
        "envoy/two-replicas.yaml",
        "envoy/istio/gateway/orders-route.yaml",
        "envoy/ISTIO.md",
    ] {
        assert!(
            check.checked.iter().any(|at| at.starts_with(file)),
            "no retry policy checked in {file}; checked: {:#?}",
            check.checked
        );
    }
}

#[test]
fn an_unsafe_retry_condition_on_a_guarded_route_is_refused() {
    let demo =
        std::fs::read_to_string(workspace_root().join("envoy/demo.yaml")).expect("envoy/demo.yaml");
    let safe = "retry_on: connect-failure,refused-stream,reset-before-request";
    assert_eq!(
        demo.matches(safe).count(),
        1,
        "the shipped demo route's retry_on"
    );
    for unsafe_condition in [
        "reset",
        "5xx",
        "gateway-error",
        "retriable-status-codes",
        "unavailable",
    ] {
        let edited = demo.replace(
            safe,
            &format!("retry_on: connect-failure,{unsafe_condition}"),
        );
        let check = retry_check_of(&edited);
        assert_eq!(
            check.violations.len(),
            1,
            "{unsafe_condition}: {:?}",
            check.violations
        );
        assert!(
            check.violations[0].contains(&format!("`{unsafe_condition}`")),
            "{:?}",
            check.violations
        );
    }
    let hedging = demo.replace(
        "retry_policy:",
        "hedge_policy: { hedge_on_per_try_timeout: true }\n                            retry_policy:",
    );
    let check = retry_check_of(&hedging);
    assert!(
        check.violations.iter().any(|v| v.contains("hedge_policy")),
        "{:?}",
        check.violations
    );
}

#[test]
fn a_route_without_the_filter_may_retry_as_it_likes() {
    let yaml = format!(
        r#"
static_resources:
  listeners:
    - filter_chains:
        - filters:
            - typed_config:
                "@type": {HCM_TYPE}
                route_config:
                  virtual_hosts:
                    - routes:
                        - route: {{ cluster: c, retry_policy: {{ retry_on: "5xx" }} }}
                          typed_per_filter_config:
                            keyflight: {{ disabled: true }}
                        - route: {{ cluster: c, retry_policy: {{ retry_on: "reset" }} }}
                http_filters:
                  - name: keyflight
                    typed_config: {{ "@type": {WASM_FILTER_TYPE} }}
            - typed_config:
                "@type": {HCM_TYPE}
                route_config:
                  virtual_hosts:
                    - routes:
                        - route: {{ cluster: c, retry_policy: {{ retry_on: "5xx" }} }}
                http_filters:
                  - name: envoy.filters.http.router
"#
    );
    let check = retry_check_of(&yaml);
    assert_eq!(check.violations.len(), 1, "{:?}", check.violations);
    assert!(
        check.violations[0].contains("routes[1]"),
        "{:?}",
        check.violations
    );
}

#[test]
fn a_virtual_service_must_not_keep_istios_default_retries() {
    let service = |retries: &str| {
        format!(
            "kind: VirtualService\nspec:\n  http:\n    - route: [{{ destination: {{ host: a }} }}]\n{retries}"
        )
    };
    let refused = [
        ("", "no `retries`"),
        ("      retries: { attempts: 2 }\n", "without `retryOn`"),
        (
            "      retries: { attempts: 2, retryOn: \"connect-failure,503\" }\n",
            "`503`",
        ),
        (
            "      retries: { attempts: 2, retryOn: gateway-error }\n",
            "`gateway-error`",
        ),
    ];
    for (retries, why) in refused {
        let check = retry_check_of(&service(retries));
        assert_eq!(
            check.violations.len(),
            1,
            "{retries}: {:?}",
            check.violations
        );
        assert!(check.violations[0].contains(why), "{:?}", check.violations);
    }
    for retries in [
        "      retries: { attempts: 0 }\n",
        "      retries: { attempts: 3, retryOn: \"connect-failure,refused-stream,reset-before-request\" }\n",
    ] {
        let check = retry_check_of(&service(retries));
        assert!(
            check.violations.is_empty(),
            "{retries}: {:?}",
            check.violations
        );
    }
}
