//! Line-level edits of a rendered Envoy config, each at an anchor that must occur exactly once.
//!
//! The e2e renderer, its scenario variants and the bench all edit the shipped
//! `envoy/demo.yaml` as text (so the file users run stays the file measured and tested).
//! An anchor that is missing or repeated is an error, never a silent no-op: a drift in the
//! shipped file then fails loudly instead of testing something else.

use crate::envoy_config::RenderError;

/// The index of the one line whose trimmed text is `anchor`.
pub fn anchor_line(lines: &[&str], anchor: &str) -> Result<usize, RenderError> {
    let found: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.trim() == anchor)
        .map(|(index, _)| index)
        .collect();
    match found[..] {
        [index] => Ok(index),
        _ => Err(RenderError(format!(
            "expected one `{anchor}` line, found {}",
            found.len()
        ))),
    }
}

/// How many spaces `line` starts with.
pub fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Inserts `block` `offset` lines after the line `anchor`, each line indented like the anchor.
pub fn insert_at(
    yaml: &str,
    anchor: &str,
    offset: usize,
    block: &[String],
) -> Result<String, RenderError> {
    let lines: Vec<&str> = yaml.lines().collect();
    let at = anchor_line(&lines, anchor)?;
    let indent = " ".repeat(indentation(lines[at]));
    Ok(splice(&lines, at + offset, at + offset, &indent, block))
}

/// Inserts `block` as the first items of the list under the line `anchor`, indented like
/// the list's current first item.
pub fn insert_after(yaml: &str, anchor: &str, block: &[String]) -> Result<String, RenderError> {
    let lines: Vec<&str> = yaml.lines().collect();
    let at = anchor_line(&lines, anchor)?;
    let indent = lines
        .get(at + 1)
        .map(|line| " ".repeat(indentation(line)))
        .ok_or_else(|| RenderError(format!("nothing follows `{anchor}`")))?;
    Ok(splice(&lines, at + 1, at + 1, &indent, block))
}

/// Replaces the line `anchor` by `block`, indented like it.
pub fn replace_line(yaml: &str, anchor: &str, block: &[String]) -> Result<String, RenderError> {
    let lines: Vec<&str> = yaml.lines().collect();
    let at = anchor_line(&lines, anchor)?;
    let indent = " ".repeat(indentation(lines[at]));
    Ok(splice(&lines, at, at + 1, &indent, block))
}

/// Replaces the one occurrence of `from` in `text` by `to`.
pub fn replace_once(text: &str, from: &str, to: &str) -> Result<String, RenderError> {
    match text.matches(from).count() {
        1 => Ok(text.replacen(from, to, 1)),
        n => Err(RenderError(format!(
            "expected `{from}` exactly once, found it {n} times"
        ))),
    }
}

/// `lines[..start]`, then `block` indented by `indent`, then `lines[end..]`.
fn splice(lines: &[&str], start: usize, end: usize, indent: &str, block: &[String]) -> String {
    let out: Vec<String> = lines[..start]
        .iter()
        .map(|line| (*line).to_owned())
        .chain(block.iter().map(|line| format!("{indent}{line}")))
        .chain(lines[end..].iter().map(|line| (*line).to_owned()))
        .collect();
    out.join("\n") + "\n"
}
