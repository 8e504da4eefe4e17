//! Every shipped proxy in front of the store closes its idle connections before the store
//! does (`docs/configuration.md#limits`).
//!
//! The store ends a keep-alive connection idle for `--header-read-timeout`
//! (`slow_clients.rs`). A proxy that keeps it longer may send a call on it just as the store
//! closes it: Envoy answers that call 503 itself, and the filter's calls are never retried,
//! so a claim fails closed and a settle waits in the outbox for no reason (seen in CI: a
//! release and the next claim both 503 after the suite's stack sat idle ten seconds). So
//! each Envoy cluster that reaches the store, and each Istio DestinationRule for it (Istio
//! applies its connection pool to the calling sidecar's cluster and to the store pod's
//! inbound one), sets an idle timeout below the store's default.

use std::time::Duration;

use keyflight_lease_store::settings::DEFAULT_HEADER_READ_TIMEOUT;
use keyflight_testkit::shipped::{files_under, workspace_root, yaml_documents};
use serde_json::Value;

/// The HTTP protocol options extension of an Envoy cluster.
const HTTP_PROTOCOL_OPTIONS: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

/// A duration as Envoy and Istio spell it (`5s`, `300s`, `1.5s`, `500ms`).
fn duration(text: &str) -> Duration {
    if let Some(ms) = text.strip_suffix("ms") {
        return Duration::from_millis(ms.parse().unwrap());
    }
    let seconds: f64 = text.strip_suffix('s').unwrap().parse().unwrap();
    Duration::from_secs_f64(seconds)
}

/// Every value in `doc` that is an Envoy cluster reaching the store: its name names the store.
fn store_clusters<'a>(doc: &'a Value, out: &mut Vec<&'a Value>) {
    match doc {
        Value::Object(map) => {
            let is_cluster =
                map.contains_key("connect_timeout") || map.contains_key("load_assignment");
            let names_store = map
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|name| name.contains("lease_store"));
            if is_cluster && names_store {
                out.push(doc);
            }
            map.values().for_each(|v| store_clusters(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| store_clusters(v, out)),
        _ => {}
    }
}

/// Every place that sets how long idle store connections are kept, with that time
/// (`None`: not set, Envoy's default of an hour).
fn idle_timeouts() -> Vec<(String, Option<Duration>)> {
    let root = workspace_root();
    let mut found = Vec::new();
    for file in [root.join("envoy"), root.join("deploy")]
        .iter()
        .flat_map(|d| files_under(d, &[".yaml", ".yml"]))
    {
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in yaml_documents(&text, &file) {
            let mut clusters = Vec::new();
            store_clusters(&doc, &mut clusters);
            for cluster in clusters {
                let idle = cluster
                    .pointer(&format!(
                        "/typed_extension_protocol_options/{}/common_http_protocol_options/idle_timeout",
                        HTTP_PROTOCOL_OPTIONS.replace('/', "~1")
                    ))
                    .and_then(Value::as_str)
                    .map(duration);
                found.push((format!("{shown}: cluster {}", cluster["name"]), idle));
            }
            let is_store_rule = doc["kind"] == "DestinationRule"
                && doc
                    .pointer("/spec/host")
                    .and_then(Value::as_str)
                    .is_some_and(|host| host.starts_with("lease-store."));
            if is_store_rule {
                let idle = doc
                    .pointer("/spec/trafficPolicy/connectionPool/http/idleTimeout")
                    .and_then(Value::as_str)
                    .map(duration);
                found.push((
                    format!("{shown}: DestinationRule {}", doc["metadata"]["name"]),
                    idle,
                ));
            }
        }
    }
    found
}

#[test]
fn every_shipped_proxy_closes_idle_store_connections_before_the_store_does() {
    let store_closes = duration(DEFAULT_HEADER_READ_TIMEOUT);
    let found = idle_timeouts();
    let places: Vec<&str> = found.iter().map(|(at, _)| at.as_str()).collect();
    for expected in [
        "envoy/demo.yaml",
        "envoy/two-replicas.yaml",
        "destination-rule.yaml",
    ] {
        assert!(
            places.iter().any(|at| at.contains(expected)),
            "{expected} was not checked: {places:?}"
        );
    }
    let late: Vec<String> = found
        .iter()
        .filter(|(_, idle)| idle.is_none_or(|idle| idle >= store_closes))
        .map(|(at, idle)| format!("{at}: idle timeout {idle:?}"))
        .collect();
    assert!(
        late.is_empty(),
        "these keep idle store connections as long as the store ({store_closes:?}) or longer: {late:#?}"
    );
}
