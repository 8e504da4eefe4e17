//! The shipped Istio AuthorizationPolicies admit every request the filter sends to the
//! lease-store ([`StoreRoute::ALL`], the table every callout is built from), from every
//! principal that runs a shipped filter, and nothing more of what the store serves.
//!
//! A policy that misses one of them fails silently: without `GET /v1/epoch` the edge cache
//! is off (F9) and every replay lands on Postgres; without a settle route every claim waits
//! out its lease. A policy that admits more (the admin API, another method) widens what a
//! compromised guarded workload can reach.
//! The callouts carry no JWT: the sidecar originates them (`istio_authz.rs` evaluates).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use keyflight_filter::parse_plugin_config;
use keyflight_filter::store_call::StoreRoute;
use serde_json::Value;

use crate::found::*;
use crate::istio_authz::{Policies, Request};

/// Every method a route's universe is probed with.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// A scope digest, in hex, for instantiating path patterns.
fn sample_scope() -> String {
    "ab".repeat(32)
}

fn kind_named<'a>(
    objects: &'a [(PathBuf, Value)],
    kind: &str,
    namespace: &str,
) -> impl Iterator<Item = &'a Value> {
    objects.iter().map(|(_, o)| o).filter(move |o| {
        o.get("kind").and_then(Value::as_str) == Some(kind)
            && o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace)
    })
}

/// The lease-store a plugin configuration calls, as shipped: where its pods listen and
/// which policies apply to them.
#[derive(Debug)]
struct Store {
    host: String,
    port: u16,
    policies: Policies,
}

fn labels_within(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// The store behind `outbound|<port>||<name>.<ns>.svc.cluster.local`, from the shipped
/// Service, Deployment and AuthorizationPolicies.
fn store_behind(cluster: &str, authority: &str, objects: &[(PathBuf, Value)]) -> Store {
    let parts: Vec<&str> = cluster.split('|').collect();
    let service_port: u64 = parts[1].parse().expect("an Istio cluster port");
    let fqdn: Vec<&str> = parts[3].split('.').collect();
    let (name, namespace) = (fqdn[0], fqdn[1]);
    let service = kind_named(objects, "Service", namespace)
        .find(|s| s.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no shipped Service {namespace}/{name} for {cluster}"));
    let selector = service.pointer("/spec/selector").expect("a selector");
    let deployment = kind_named(objects, "Deployment", namespace)
        .find(|d| {
            labels_within(
                selector,
                d.pointer("/spec/template/metadata/labels")
                    .unwrap_or(&Value::Null),
            )
        })
        .unwrap_or_else(|| panic!("no shipped Deployment behind Service {namespace}/{name}"));
    let pod_labels = deployment
        .pointer("/spec/template/metadata/labels")
        .expect("pod labels");
    let target = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(service_port))
        .and_then(|p| p.get("targetPort").cloned())
        .unwrap_or(Value::from(service_port));
    let port = match target {
        Value::Number(n) => n.as_u64().expect("a port number"),
        Value::String(port_name) => deployment
            .pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|c| {
                c.get("ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .find(|p| p.get("name").and_then(Value::as_str) == Some(port_name.as_str()))
            .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
            .unwrap_or_else(|| panic!("no container port named {port_name}")),
        other => panic!("targetPort {other}"),
    };
    let mut policies = Policies::default();
    for policy in ["istio-system", namespace]
        .into_iter()
        .flat_map(|ns| kind_named(objects, "AuthorizationPolicy", ns))
    {
        let applies = policy
            .pointer("/spec/selector/matchLabels")
            .is_none_or(|selector| labels_within(selector, pod_labels));
        if !applies {
            continue;
        }
        policies.add(policy.clone());
    }
    Store {
        host: authority.to_owned(),
        port: u16::try_from(port).expect("a port"),
        policies,
    }
}

/// The lease-store's routes (path pattern → its router text), from its router.
fn store_router() -> BTreeMap<String, String> {
    let source = std::fs::read_to_string(workspace_root().join("lease-store/src/api/mod.rs"))
        .expect("the lease-store's router");
    let mut routes = BTreeMap::new();
    for piece in source.split(".route(").skip(1) {
        let Some(rest) = piece.trim_start().strip_prefix('"') else {
            continue;
        };
        let (path, handlers) = rest.split_once('"').expect("a closing quote");
        routes.insert(path.to_owned(), handlers.to_owned());
    }
    assert!(
        routes.len() >= StoreRoute::ALL.len(),
        "found too few routes in lease-store/src/api/mod.rs: {routes:?}"
    );
    routes
}

fn instantiate(pattern: &str) -> String {
    pattern.replace(StoreRoute::SCOPE, &sample_scope())
}

/// Every principal that runs a shipped filter, with the store its filter calls.
fn callers() -> Vec<(String, Store)> {
    let objects = shipped_objects();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for found in shipped().iter().filter(|f| is_istio(f)) {
        let namespace = found
            .object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/namespace"))
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{}: no metadata.namespace", found.file.display()))
            .to_owned();
        let config = parse_plugin_config(found.json.as_bytes()).expect("accepted");
        let lease_store = &config.lease_store;
        if !seen.insert((namespace.clone(), lease_store.cluster.clone())) {
            continue;
        }
        let store = store_behind(&lease_store.cluster, &lease_store.authority, &objects);
        let own = format!("cluster.local/ns/{namespace}/sa/");
        let principals: Vec<String> = store
            .policies
            .named_principals()
            .into_iter()
            .filter(|p| p.starts_with(&own))
            .collect();
        assert!(
            !principals.is_empty(),
            "{}: no workload of namespace {namespace} may call the lease-store at all",
            found.file.display()
        );
        for principal in principals {
            let store = store_behind(&lease_store.cluster, &lease_store.authority, &objects);
            out.push((principal, store));
        }
    }
    assert!(!out.is_empty(), "no shipped Istio filter found");
    out
}

fn request(principal: &str, store: &Store, method: &str, path: String) -> Request {
    Request {
        principal: principal.to_owned(),
        request_principal: None,
        method: method.to_owned(),
        path,
        port: store.port,
        host: store.host.clone(),
    }
}

#[test]
fn every_store_route_the_filter_calls_is_one_the_store_serves() {
    let router = store_router();
    for route in StoreRoute::ALL {
        let handlers = router
            .get(route.pattern())
            .unwrap_or_else(|| panic!("the store has no route {}", route.pattern()));
        let method = format!("{}(", route.method().to_lowercase());
        assert!(
            handlers.contains(&method),
            "the store does not serve {} {}",
            route.method(),
            route.pattern()
        );
    }
}

#[test]
fn the_shipped_policies_admit_every_store_call_of_every_filter() {
    let mut refused = Vec::new();
    for (principal, store) in callers() {
        for route in StoreRoute::ALL {
            let req = request(
                &principal,
                &store,
                route.method(),
                instantiate(route.pattern()),
            );
            if !store.policies.admits(&req) {
                refused.push(format!("{principal}: {} {}", req.method, req.path));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "the shipped AuthorizationPolicies refuse store calls the filter makes:\n{}",
        refused.join("\n")
    );
}

/// Every (method, path) of the store's router that `policies` admit for `principal`
/// beyond the filter's own calls.
fn admitted_beyond_the_filter(principal: &str, store: &Store) -> Vec<String> {
    let own: BTreeSet<(String, String)> = StoreRoute::ALL
        .iter()
        .map(|r| (r.method().to_owned(), instantiate(r.pattern())))
        .collect();
    let mut extra = Vec::new();
    for path in store_router().keys() {
        for method in METHODS {
            let req = request(principal, store, method, instantiate(path));
            if store.policies.admits(&req) && !own.contains(&(req.method.clone(), req.path.clone()))
            {
                extra.push(format!("{principal}: {method} {path}"));
            }
        }
    }
    extra
}

#[test]
fn the_shipped_policies_admit_nothing_else_the_store_serves_to_a_filter() {
    let mut extra = Vec::new();
    for (principal, store) in callers() {
        extra.extend(admitted_beyond_the_filter(&principal, &store));
    }
    assert!(
        extra.is_empty(),
        "the shipped AuthorizationPolicies admit more than the filter calls:\n{}",
        extra.join("\n")
    );
}

#[test]
fn a_wider_policy_would_be_caught() {
    let (principal, mut store) = callers().into_iter().next().expect("a caller");
    store.policies.allow.push(serde_json::json!({
        "spec": { "rules": [{
            "from": [{ "source": { "principals": [principal] } }],
            "to": [{ "operation": { "paths": ["/v1/*"] } }]
        }]}
    }));
    let extra = admitted_beyond_the_filter(&principal, &store);
    assert!(
        extra
            .iter()
            .any(|e| e.ends_with("DELETE /v1/records/{scope}")),
        "{extra:?}"
    );
    store.policies.deny.push(serde_json::json!({
        "spec": { "rules": [{ "to": [{ "operation": { "paths": ["/v1/epoch"] } }] }] }
    }));
    let epoch = request(&principal, &store, "GET", "/v1/epoch".to_owned());
    assert!(!store.policies.admits(&epoch), "a DENY policy wins");
}
