//! Reading an OpenAPI document (3.0 or 3.1, JSON or YAML) as the tree it is written as:
//! keys keep their order, so an operation the overlay does not touch is written back
//! exactly as it was read.
//!
//! A YAML mapping key may be a number (`200:` unquoted), which OpenAPI asks authors to
//! quote; every lookup here compares a key by its text, so `200` and `"200"` are one key.

use serde_yaml_ng::{Mapping, Value};

/// How a document was written; the overlay and the patched document are written the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Reads a document: JSON when its first non-blank character is `{`, else YAML.
pub fn parse(text: &str) -> Result<(Value, Format), String> {
    if text.trim_start().starts_with('{') {
        let value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        Ok((value, Format::Json))
    } else {
        let value = serde_yaml_ng::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
        Ok((value, Format::Yaml))
    }
}

/// Writes a document in `format`, ending in a newline.
pub fn render(value: &Value, format: Format) -> Result<String, String> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map(|mut s| {
                s.push('\n');
                s
            })
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_yaml_ng::to_string(value).map_err(|e| e.to_string()),
    }
}

/// A mapping key's text: a string, or a number or boolean YAML read unquoted.
pub fn key_text(key: &Value) -> Option<String> {
    match key {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The value under the key whose text is `name`.
pub fn get<'a>(map: &'a Mapping, name: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| key_text(k).as_deref() == Some(name))
        .map(|(_, v)| v)
}

/// The value under `name` when `value` is a mapping.
pub fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    value.as_mapping().and_then(|m| get(m, name))
}

/// Follows a local `$ref` (`#/components/…`) once; any other value is itself.
pub fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    let Some(reference) = field(value, "$ref").and_then(Value::as_str) else {
        return value;
    };
    let Some(pointer) = reference.strip_prefix("#/") else {
        return value;
    };
    let mut node = doc;
    for segment in pointer.split('/') {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        match field(node, &segment) {
            Some(next) => node = next,
            None => return value,
        }
    }
    node
}

/// A mapping with these string keys, in this order.
pub fn mapping<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Mapping(
        entries
            .into_iter()
            .map(|(k, v)| (Value::String(k.to_owned()), v))
            .collect(),
    )
}

/// A string value.
pub fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}
