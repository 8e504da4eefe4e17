//! The part of Istio's AuthorizationPolicy evaluation the shipped policies use, for
//! checking what they admit: DENY before ALLOW, an ALLOW policy denies what it does not
//! match; exact, prefix `x*`, suffix `*x` and presence `*` string matches. A field it does
//! not model fails the test rather than be guessed at.

use serde_json::Value;

/// One request as the receiving sidecar sees it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The mTLS peer (`cluster.local/ns/NS/sa/SA`).
    pub(crate) principal: String,
    /// The verified JWT's `iss/sub`, if any.
    pub(crate) request_principal: Option<String>,
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) port: u16,
    pub(crate) host: String,
}

/// Istio's string match: exact, `prefix*`, `*suffix`, or `*`.
fn istio_match(pattern: &str, value: &str) -> bool {
    if pattern == "*" {
        true
    } else if let Some(prefix) = pattern.strip_suffix('*') {
        value.starts_with(prefix)
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        value.ends_with(suffix)
    } else {
        pattern == value
    }
}

pub(crate) fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    value.map(|v| {
        v.as_array()
            .unwrap_or_else(|| panic!("{v} is not a list"))
            .iter()
            .map(|s| match s {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect()
    })
}

/// `field` (a list) matches `value` if present; `not_field` must not match it. An absent
/// value (no request principal) matches neither list.
fn field_matches(object: &Value, field: &str, not_field: &str, value: Option<&str>) -> bool {
    let any = |list: Vec<String>| value.is_some_and(|v| list.iter().any(|p| istio_match(p, v)));
    strings(object.get(field)).is_none_or(any) && !strings(object.get(not_field)).is_some_and(any)
}

fn only_known_fields(object: &Value, known: &[&str], what: &str) {
    for key in object.as_object().into_iter().flatten().map(|(k, _)| k) {
        assert!(
            known.contains(&key.as_str()),
            "{what}.{key} is not modelled by this check: extend istio_authz.rs"
        );
    }
}

fn source_matches(source: &Value, request: &Request) -> bool {
    only_known_fields(
        source,
        &[
            "principals",
            "notPrincipals",
            "namespaces",
            "notNamespaces",
            "requestPrincipals",
            "notRequestPrincipals",
        ],
        "source",
    );
    let namespace = request.principal.split('/').nth(2);
    field_matches(
        source,
        "principals",
        "notPrincipals",
        Some(&request.principal),
    ) && field_matches(source, "namespaces", "notNamespaces", namespace)
        && field_matches(
            source,
            "requestPrincipals",
            "notRequestPrincipals",
            request.request_principal.as_deref(),
        )
}

fn operation_matches(operation: &Value, request: &Request) -> bool {
    only_known_fields(
        operation,
        &[
            "methods",
            "notMethods",
            "paths",
            "notPaths",
            "ports",
            "notPorts",
            "hosts",
            "notHosts",
        ],
        "operation",
    );
    let port = request.port.to_string();
    field_matches(operation, "methods", "notMethods", Some(&request.method))
        && field_matches(operation, "paths", "notPaths", Some(&request.path))
        && field_matches(operation, "ports", "notPorts", Some(&port))
        && field_matches(operation, "hosts", "notHosts", Some(&request.host))
}

fn rule_matches(rule: &Value, request: &Request) -> bool {
    only_known_fields(rule, &["from", "to"], "rule");
    let from = rule.get("from").and_then(Value::as_array);
    let to = rule.get("to").and_then(Value::as_array);
    from.is_none_or(|from| {
        from.iter()
            .any(|f| source_matches(f.get("source").unwrap_or(&Value::Null), request))
    }) && to.is_none_or(|to| {
        to.iter()
            .any(|t| operation_matches(t.get("operation").unwrap_or(&Value::Null), request))
    })
}

fn policy_matches(policy: &Value, request: &Request) -> bool {
    policy
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|rule| rule_matches(rule, request))
}

/// The AuthorizationPolicies that apply to one workload.
#[derive(Debug, Default)]
pub(crate) struct Policies {
    pub(crate) allow: Vec<Value>,
    pub(crate) deny: Vec<Value>,
}

impl Policies {
    /// Sorts `policy` by its action.
    pub(crate) fn add(&mut self, policy: Value) {
        match policy
            .pointer("/spec/action")
            .and_then(Value::as_str)
            .unwrap_or("ALLOW")
        {
            "ALLOW" => self.allow.push(policy),
            "DENY" => self.deny.push(policy),
            other => panic!("an AuthorizationPolicy with action {other} is not modelled"),
        }
    }

    pub(crate) fn admits(&self, request: &Request) -> bool {
        !self.deny.iter().any(|p| policy_matches(p, request))
            && (self.allow.is_empty() || self.allow.iter().any(|p| policy_matches(p, request)))
    }

    /// Every principal the ALLOW rules name.
    pub(crate) fn named_principals(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for policy in &self.allow {
            for rule in policy
                .pointer("/spec/rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for from in rule
                    .get("from")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    out.extend(strings(from.pointer("/source/principals")).unwrap_or_default());
                }
            }
        }
        out
    }
}
