//! Which of a document's operations the plugin configuration guards: the filter's own
//! matcher ([`Config::match_policy`]) run on a request the operation would receive
//! (`docs/operations.md#the-contract-in-a-services-openapi`).
//!
//! An OpenAPI path is a template (`/payments/{id}`) and a policy matches concrete paths,
//! so each template variable is filled with a sample of its parameter — its `example`,
//! else its schema's `example`, first `enum` value or `default`, else a value of its type
//! and format — and the path is prefixed with the server's base path, as a request
//! reaching the proxy carries it.

use std::rc::Rc;

use keyflight_filter::config::{Config, Policy};
use keyflight_protocol::Target;
use serde_yaml_ng::Value;

use super::document::{field, key_text, resolve};

/// The operation fields of a path item, in the order OpenAPI lists them.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Where the service is reached, as the proxy sees its requests.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// The `:authority` requests carry; required when a policy matches on one.
    pub authority: Option<String>,
    /// The path every operation's path is appended to; default: the path of the
    /// document's first server URL.
    pub base_path: Option<String>,
}

/// One operation of the document and the policy guarding it, if any.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The path template as written in `paths`.
    pub path: String,
    /// The operation field (`post`).
    pub method: &'static str,
    /// The request path it was matched with.
    pub sample: String,
    /// The first policy matching it, as the filter picks one.
    pub policy: Option<Rc<Policy>>,
}

/// Every operation in `paths`, in document order, with its guarding policy.
pub fn operations(doc: &Value, config: &Config, site: &Site) -> Result<Vec<Operation>, String> {
    if site.authority.is_none()
        && let Some(policy) = config
            .policies
            .iter()
            .find(|p| p.matcher.authority.is_some())
    {
        return Err(format!(
            "policy {} matches on an authority: pass --authority (the service's host as \
             requests to it name it)",
            policy.name
        ));
    }
    let base = base_path(doc, site)?;
    let authority = site.authority.as_deref().unwrap_or("");
    let mut out = Vec::new();
    let Some(paths) = field(doc, "paths").and_then(Value::as_mapping) else {
        return Ok(out);
    };
    for (key, item) in paths {
        let Some(path) = key_text(key) else { continue };
        for method in METHODS {
            let Some(operation) = field(item, method) else {
                continue;
            };
            let sample = format!("{base}{}", fill(doc, &path, item, operation));
            let target = Target::new(&method.to_ascii_uppercase(), &sample, authority, None);
            out.push(Operation {
                path: path.clone(),
                method,
                policy: config.match_policy(&target).cloned(),
                sample,
            });
        }
    }
    Ok(out)
}

/// The base path: `--base-path`, else the path of the first server URL (none: empty).
fn base_path(doc: &Value, site: &Site) -> Result<String, String> {
    let url = match &site.base_path {
        Some(path) => path.clone(),
        None => {
            let first = field(doc, "servers")
                .and_then(Value::as_sequence)
                .and_then(|s| s.first());
            match first.and_then(|s| field(s, "url")).and_then(Value::as_str) {
                None => return Ok(String::new()),
                Some(url) => match url.split_once("://") {
                    Some((_, rest)) => rest.find('/').map_or("", |i| &rest[i..]).to_owned(),
                    None => url.to_owned(),
                },
            }
        }
    };
    if url.contains('{') {
        return Err(format!(
            "the server URL's path {url:?} has variables: pass --base-path"
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The path with every `{name}` replaced by a sample of its path parameter.
fn fill(doc: &Value, path: &str, item: &Value, operation: &Value) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|i| open + i) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&sample(doc, &rest[open + 1..close], item, operation));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// A sample value of the path parameter `name` (the operation's own declaration first).
fn sample(doc: &Value, name: &str, item: &Value, operation: &Value) -> String {
    let declared = [operation, item]
        .into_iter()
        .filter_map(|v| field(v, "parameters").and_then(Value::as_sequence))
        .flatten()
        .map(|p| resolve(doc, p))
        .find(|p| {
            field(p, "in").and_then(Value::as_str) == Some("path")
                && field(p, "name").and_then(Value::as_str) == Some(name)
        });
    let Some(parameter) = declared else {
        return "x".to_owned();
    };
    let schema = field(parameter, "schema").map(|s| resolve(doc, s));
    let given = field(parameter, "example")
        .or_else(|| schema.and_then(|s| field(s, "example")))
        .or_else(|| {
            schema
                .and_then(|s| field(s, "enum"))
                .and_then(Value::as_sequence)
                .and_then(|e| e.first())
        })
        .or_else(|| schema.and_then(|s| field(s, "default")));
    if let Some(text) = given.and_then(key_text) {
        return text;
    }
    let kind = schema.and_then(|s| field(s, "type"));
    let kind = kind
        .and_then(Value::as_str)
        .or_else(|| {
            // 3.1 allows a list of types (`[integer, "null"]`).
            kind.and_then(Value::as_sequence)
                .and_then(|k| k.iter().filter_map(Value::as_str).find(|t| *t != "null"))
        })
        .unwrap_or("string");
    let format = schema
        .and_then(|s| field(s, "format"))
        .and_then(Value::as_str);
    match (kind, format) {
        ("integer" | "number", _) => "1".to_owned(),
        (_, Some("uuid")) => "00000000-0000-0000-0000-000000000000".to_owned(),
        _ => "x".to_owned(),
    }
}
