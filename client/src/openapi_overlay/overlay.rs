//! The Overlay (OAI Overlay Specification 1.0.0) that writes keyflight's contract into
//! the guarded operations (`docs/operations.md#the-contract-in-a-services-openapi`).
//!
//! One action per guarded operation, targeting it by its normalized JSONPath
//! (`$['paths']['/payments']['post']`), whose `update` holds only what the operation
//! lacks: the overlay merges and never overwrites. A response the service already
//! documents for a status keyflight also answers keeps its description, its media types
//! and its headers; keyflight adds its `application/problem+json` media type and
//! `Retry-After` where they are missing, and says so in a note where the service's own
//! problem+json stands for both. A response given by reference is left alone (changing
//! the shared component would change every operation using it), with a note. Unguarded
//! operations get no action at all.
//!
//! The problem+json schema is added once, as `components.schemas.KeyflightProblem`, and
//! referenced; a document without `components`, or with a `KeyflightProblem` of its own,
//! gets it inline instead.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use keyflight_filter::config::{Config, Policy};
use keyflight_filter::contract::{Answer, CODES, answers};
use keyflight_filter::status_matrix::{Disposition, ResponseOrigin, classify};
use keyflight_protocol::headers::REPLAYED_HEADER;
use keyflight_protocol::key::MAX_KEY_BYTES;
use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem};
use serde_yaml_ng::{Mapping, Value};

use super::document::{field, get, key_text, mapping, resolve, string};
use super::operations::Operation;

/// The name of the problem schema among the document's components.
const PROBLEM_SCHEMA: &str = "KeyflightProblem";

/// The overlay document and what a reader of it should know.
#[derive(Debug)]
pub struct Generated {
    /// The Overlay document.
    pub overlay: Value,
    /// Where the service's own documentation was kept in place of keyflight's.
    pub notes: Vec<String>,
}

/// Builds the overlay for `operations` of `doc`; `extends` names the document.
pub fn generate(
    doc: &Value,
    config: &Config,
    operations: &[Operation],
    extends: &str,
) -> Generated {
    let mut actions = Vec::new();
    let mut notes = Vec::new();
    let (schema, component) = schema_use(doc, &mut notes);
    for operation in operations {
        let Some(policy) = &operation.policy else {
            continue;
        };
        let Some(item) = field(doc, "paths").and_then(|p| field(p, &operation.path)) else {
            continue;
        };
        let Some(node) = field(item, operation.method) else {
            continue;
        };
        let at = format!("{} {}", operation.method.to_uppercase(), operation.path);
        let target = normalized_path(&["paths", &operation.path, operation.method]);
        let mut update = Mapping::new();
        if let Some(parameter) = key_parameter(doc, config, policy, [node, item], &at, &mut notes) {
            match field(node, "parameters") {
                // Appended to the operation's own list, which it must not replace.
                Some(Value::Sequence(_)) => actions.push(action(
                    &format!("{target}['parameters']"),
                    &format!("{at}: the {} header", config.key_header),
                    parameter,
                )),
                _ => {
                    update.insert(string("parameters"), Value::Sequence(vec![parameter]));
                }
            }
        }
        let responses = responses(config, policy, node, &schema, &at, &mut notes);
        if !responses.is_empty() {
            update.insert(string("responses"), Value::Mapping(responses));
        }
        if !update.is_empty() {
            actions.push(action(
                &target,
                &format!(
                    "{at}: guarded by policy {}: keyflight's answers",
                    policy.name
                ),
                Value::Mapping(update),
            ));
        }
    }
    if let Some(component) = component
        && !actions.is_empty()
    {
        actions.insert(0, component);
    }
    let overlay = mapping([
        ("overlay", string("1.0.0")),
        (
            "info",
            mapping([
                (
                    "title",
                    string("keyflight: the Idempotency-Key contract of the guarded operations"),
                ),
                ("version", string(env!("CARGO_PKG_VERSION"))),
            ]),
        ),
        ("extends", string(extends)),
        ("actions", Value::Sequence(actions)),
    ]);
    Generated { overlay, notes }
}

/// The schema value media types use (a reference, or the schema inline) and the action
/// adding the component, if one is needed.
fn schema_use(doc: &Value, notes: &mut Vec<String>) -> (Value, Option<Value>) {
    let schema = problem_schema();
    let Some(components) = field(doc, "components") else {
        return (schema, None);
    };
    let reference = mapping([(
        "$ref",
        string(&format!("#/components/schemas/{PROBLEM_SCHEMA}")),
    )]);
    match field(components, "schemas").and_then(|s| field(s, PROBLEM_SCHEMA)) {
        Some(existing) if *existing == schema => (reference, None),
        Some(_) => {
            notes.push(format!(
                "components.schemas.{PROBLEM_SCHEMA} is the document's own: keyflight's \
                 problem schema is written inline"
            ));
            (schema, None)
        }
        None => {
            let update = mapping([("schemas", mapping([(PROBLEM_SCHEMA, schema)]))]);
            let action = action(
                &normalized_path(&["components"]),
                "the problem details keyflight answers with",
                update,
            );
            (reference, Some(action))
        }
    }
}

/// An RFC 9535 normalized path of member names.
pub fn normalized_path(names: &[&str]) -> String {
    let mut out = String::from("$");
    for name in names {
        out.push_str("['");
        for c in name.chars() {
            match c {
                '\'' => out.push_str("\\'"),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c < ' ' => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
        out.push_str("']");
    }
    out
}

fn action(target: &str, description: &str, update: Value) -> Value {
    mapping([
        ("target", string(target)),
        ("description", string(description)),
        ("update", update),
    ])
}

/// The key header parameter, unless the operation or its path item (`declaring`)
/// declares it already (then a note when its `required` disagrees with the policy).
fn key_parameter(
    doc: &Value,
    config: &Config,
    policy: &Policy,
    declaring: [&Value; 2],
    at: &str,
    notes: &mut Vec<String>,
) -> Option<Value> {
    let declared = declaring
        .into_iter()
        .filter_map(|v| field(v, "parameters").and_then(Value::as_sequence))
        .flatten()
        .map(|p| resolve(doc, p))
        .find(|p| {
            field(p, "in").and_then(Value::as_str) == Some("header")
                && field(p, "name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.eq_ignore_ascii_case(&config.key_header))
        });
    if let Some(declared) = declared {
        let required = field(declared, "required").and_then(Value::as_bool) == Some(true);
        if required != policy.require_key {
            notes.push(format!(
                "{at}: keeps its own {} parameter, required: {required}, while policy {} \
                 has require_key: {}",
                config.key_header, policy.name, policy.require_key
            ));
        }
        return None;
    }
    let description = if policy.require_key {
        "Required: keyflight refuses a request without it (400). Retries of one operation \
         send the same key; the first runs, the others get its answer."
    } else {
        "Retries of one operation send the same key; the first runs, the others get its \
         answer. Without it the request is not deduplicated."
    };
    Some(mapping([
        ("name", string(&header_case(&config.key_header))),
        ("in", string("header")),
        ("required", Value::Bool(policy.require_key)),
        ("description", string(description)),
        (
            "schema",
            mapping([
                ("type", string("string")),
                ("minLength", Value::Number(1.into())),
                ("maxLength", Value::Number(MAX_KEY_BYTES.into())),
                // Visible ASCII (K1).
                ("pattern", string("^[!-~]+$")),
            ]),
        ),
    ]))
}

/// The `responses` update: keyflight's answers by status, and the replay marker on the
/// operation's own answers that keyflight records and replays (F6, F8).
fn responses(
    config: &Config,
    policy: &Policy,
    operation: &Value,
    schema: &Value,
    at: &str,
    notes: &mut Vec<String>,
) -> Mapping {
    let mut by_status: BTreeMap<u16, Vec<Answer>> = BTreeMap::new();
    for answer in answers(config, policy) {
        by_status.entry(answer.status).or_default().push(answer);
    }
    let empty = Mapping::new();
    let existing = field(operation, "responses")
        .and_then(Value::as_mapping)
        .unwrap_or(&empty);
    let mut out = Mapping::new();
    for (key, response) in existing {
        let Some(status) = key_text(key) else {
            continue;
        };
        let ours = status.parse().ok().and_then(|s: u16| by_status.get(&s));
        let replayed = is_replayed(policy, &status);
        if ours.is_none() && !replayed {
            continue;
        }
        if field(response, "$ref").is_some() {
            notes.push(format!(
                "{at}: response {status} is a reference; left as it is (add keyflight's \
                 answers to the shared component by hand if they belong there)"
            ));
            continue;
        }
        let mut update = Mapping::new();
        if let Some(ours) = ours {
            let content = field(response, "content").and_then(Value::as_mapping);
            match content.and_then(|c| get(c, PROBLEM_CONTENT_TYPE)) {
                Some(_) => notes.push(format!(
                    "{at}: response {status} keeps its own {PROBLEM_CONTENT_TYPE}, which now \
                     also stands for keyflight's {}",
                    codes(ours)
                )),
                None => {
                    update.insert(
                        string("content"),
                        mapping([(PROBLEM_CONTENT_TYPE, media_type(ours, schema))]),
                    );
                }
            }
        }
        let mut headers = Mapping::new();
        let has_header = |name: &str| {
            field(response, "headers")
                .and_then(Value::as_mapping)
                .is_some_and(|h| {
                    h.keys()
                        .any(|k| key_text(k).is_some_and(|k| k.eq_ignore_ascii_case(name)))
                })
        };
        if let Some(ours) = ours
            && ours.iter().any(|a| a.retry_after)
            && !has_header("retry-after")
        {
            headers.insert(string("Retry-After"), retry_after(ours));
        }
        if replayed && !has_header(REPLAYED_HEADER) {
            headers.insert(string(&header_case(REPLAYED_HEADER)), replay_marker());
        }
        if !headers.is_empty() {
            update.insert(string("headers"), Value::Mapping(headers));
        }
        if !update.is_empty() {
            // The key as the document spells it (an unquoted YAML `409` stays a number), so
            // any Overlay tool merges into this response rather than adding a `"409"` beside it.
            out.insert(key.clone(), Value::Mapping(update));
        }
    }
    for (status, ours) in &by_status {
        let status = status.to_string();
        if get(existing, &status).is_none() {
            out.insert(string(&status), response(ours, schema));
        }
    }
    out
}

/// Whether the operation's own answer `status` (`200`, `2XX`, `default`) is one keyflight
/// records and replays under `policy`: any status it covers is (F6).
fn is_replayed(policy: &Policy, status: &str) -> bool {
    let recorded = |s: u16| {
        classify(
            s,
            ResponseOrigin::Upstream,
            &policy.forget_statuses,
            policy.server_errors,
        ) == Disposition::Record
    };
    match status.as_bytes() {
        b"default" => true,
        [d, b'X' | b'x', b'X' | b'x'] if d.is_ascii_digit() => {
            let base = u16::from(d - b'0') * 100;
            (base..base + 100).any(recorded)
        }
        _ => status.parse().is_ok_and(recorded),
    }
}

/// A whole response for a status the operation does not document.
fn response(ours: &[Answer], schema: &Value) -> Value {
    let mut response = Mapping::new();
    response.insert(
        string("description"),
        string(&format!("keyflight: {}", titles(ours))),
    );
    if ours.iter().any(|a| a.retry_after) {
        response.insert(
            string("headers"),
            mapping([("Retry-After", retry_after(ours))]),
        );
    }
    response.insert(
        string("content"),
        mapping([(PROBLEM_CONTENT_TYPE, media_type(ours, schema))]),
    );
    Value::Mapping(response)
}

/// The problem+json media type: the schema, and one example per code.
fn media_type(ours: &[Answer], schema: &Value) -> Value {
    let examples = ours
        .iter()
        .map(|a| {
            let problem = Problem::new(a.code, a.status, a.code.title());
            let value = serde_yaml_ng::to_value(&problem).unwrap_or(Value::Null);
            (
                string(a.code.as_str()),
                mapping([("summary", string(a.code.title())), ("value", value)]),
            )
        })
        .collect();
    mapping([
        ("schema", schema.clone()),
        ("examples", Value::Mapping(examples)),
    ])
}

/// RFC 9457 problem details as the filter sends them (`keyflight_protocol::problem::Problem`).
fn problem_schema() -> Value {
    let text = |format: Option<&str>| match format {
        Some(f) => mapping([("type", string("string")), ("format", string(f))]),
        None => mapping([("type", string("string"))]),
    };
    let codes = CODES.iter().map(|c| string(c.as_str())).collect();
    mapping([
        ("type", string("object")),
        (
            "description",
            string("RFC 9457 problem details, as keyflight answers on its own"),
        ),
        (
            "required",
            Value::Sequence(
                ["type", "title", "status", "detail", "code"]
                    .into_iter()
                    .map(string)
                    .collect(),
            ),
        ),
        (
            "properties",
            mapping([
                ("type", text(Some("uri"))),
                ("title", text(None)),
                ("status", mapping([("type", string("integer"))])),
                ("detail", text(None)),
                (
                    "code",
                    mapping([("type", string("string")), ("enum", Value::Sequence(codes))]),
                ),
            ]),
        ),
    ])
}

fn retry_after(ours: &[Answer]) -> Value {
    mapping([
        (
            "description",
            string("Seconds to wait before retrying with the same key"),
        ),
        ("required", Value::Bool(ours.iter().all(|a| a.retry_after))),
        (
            "schema",
            mapping([
                ("type", string("integer")),
                ("minimum", Value::Number(1.into())),
            ]),
        ),
    ])
}

fn replay_marker() -> Value {
    mapping([
        (
            "description",
            string(
                "`true` when keyflight answers with the recorded response of an earlier \
                 request with the same key instead of running the operation again",
            ),
        ),
        (
            "schema",
            mapping([
                ("type", string("string")),
                ("enum", Value::Sequence(vec![string("true")])),
            ]),
        ),
    ])
}

fn titles(ours: &[Answer]) -> String {
    ours.iter()
        .map(|a| a.code.title())
        .collect::<Vec<_>>()
        .join("; ")
}

fn codes(ours: &[Answer]) -> String {
    ours.iter()
        .map(|a| a.code.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `idempotency-key` → `Idempotency-Key`: header names are case-insensitive, and
/// documentation spells them this way.
fn header_case(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}
