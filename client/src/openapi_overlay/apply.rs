//! Applies an Overlay 1.0 document whose targets are normalized paths of member names
//! (`$['paths']['/payments']['post']`, what [`super::overlay`] writes): the patched
//! document `--patched` writes is this overlay applied, so the two cannot disagree.
//!
//! Per the specification, an `update` is merged recursively into a selected object (its
//! values win where both have a member), appended to a selected array, and a target that
//! selects nothing changes nothing.

use serde_yaml_ng::{Mapping, Value};

use super::document::key_text;

/// Why an overlay could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("action {index}: {message}")]
pub struct ApplyError {
    index: usize,
    message: String,
}

/// Applies every action of `overlay` to `doc`, in order.
pub fn apply(doc: &mut Value, overlay: &Value) -> Result<(), ApplyError> {
    let actions = super::document::field(overlay, "actions")
        .and_then(Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (index, action) in actions.iter().enumerate() {
        let error = |message: String| ApplyError { index, message };
        let target = super::document::field(action, "target")
            .and_then(Value::as_str)
            .ok_or_else(|| error("no target".to_owned()))?;
        let names = parse_normalized_path(target).map_err(error)?;
        let Some(update) = super::document::field(action, "update") else {
            continue;
        };
        let Some(node) = select(doc, &names) else {
            continue;
        };
        match (node, update) {
            (Value::Mapping(node), Value::Mapping(update)) => merge(node, update),
            (Value::Sequence(node), update) => node.push(update.clone()),
            _ => {
                return Err(error(format!(
                    "{target} selects neither an object merged with an object nor an array"
                )));
            }
        }
    }
    Ok(())
}

fn select<'a>(doc: &'a mut Value, names: &[String]) -> Option<&'a mut Value> {
    let mut node = doc;
    for name in names {
        node = node
            .as_mapping_mut()?
            .iter_mut()
            .find(|(k, _)| key_text(k).as_deref() == Some(name))
            .map(|(_, v)| v)?;
    }
    Some(node)
}

/// Merges `update` into `node`: members of both that are objects merge, any other value
/// of `update` replaces or is added (at the end, keeping the node's order).
fn merge(node: &mut Mapping, update: &Mapping) {
    for (key, value) in update {
        let name = key_text(key);
        let present = node
            .iter_mut()
            .find(|(k, _)| name.is_some() && key_text(k) == name)
            .map(|(_, v)| v);
        match (present, value) {
            (Some(Value::Mapping(inner)), Value::Mapping(value)) => merge(inner, value),
            (Some(slot), value) => *slot = value.clone(),
            (None, value) => {
                node.insert(key.clone(), value.clone());
            }
        }
    }
}

/// `$['a']['b\'c']` → `["a", "b'c"]`; anything else is refused.
fn parse_normalized_path(target: &str) -> Result<Vec<String>, String> {
    let refuse = || format!("{target:?} is not a normalized path of member names");
    let mut rest = target.strip_prefix('$').ok_or_else(refuse)?.chars();
    let mut names = Vec::new();
    loop {
        match rest.next() {
            None => return Ok(names),
            Some('[') => {}
            Some(_) => return Err(refuse()),
        }
        if rest.next() != Some('\'') {
            return Err(refuse());
        }
        let mut name = String::new();
        loop {
            match rest.next().ok_or_else(refuse)? {
                '\'' => break,
                '\\' => match rest.next().ok_or_else(refuse)? {
                    'b' => name.push('\u{8}'),
                    'f' => name.push('\u{c}'),
                    'n' => name.push('\n'),
                    'r' => name.push('\r'),
                    't' => name.push('\t'),
                    'u' => {
                        let hex: String = rest.by_ref().take(4).collect();
                        let c = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(refuse)?;
                        name.push(c);
                    }
                    c => name.push(c),
                },
                c => name.push(c),
            }
        }
        if rest.next() != Some(']') {
            return Err(refuse());
        }
        names.push(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openapi_overlay::overlay::normalized_path;

    #[test]
    fn normalized_paths_round_trip() {
        let names = ["paths", "/a/{id}'s\\x", "tab\there\u{1}"];
        let path = normalized_path(&names);
        assert_eq!(parse_normalized_path(&path).unwrap(), names);
        assert!(parse_normalized_path("$.paths").is_err());
    }
}
