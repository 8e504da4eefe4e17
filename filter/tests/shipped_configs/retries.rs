//! F15: a shipped guarded route retries only where the request never reached
//! the upstream (`docs/envoy-facts.md#router-retries`).

use std::path::Path;

use serde_json::Value;

use crate::found::*;

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
