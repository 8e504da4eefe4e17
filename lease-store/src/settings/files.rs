//! What the settings files hold: the filter's token file, the workloads file and the
//! operators' token file, parsed from their text (`docs/configuration.md#caller-identity`,
//! `docs/records.md#operators`).
//!
//! Each file is one entry a line; blank lines and `#` comments are skipped. An error names
//! the line, never a token. Reading the files, and reading them again when they change, is
//! the live sets' job ([`crate::access`]); `--workload` ids are checked here at start.

use std::sync::Arc;

use super::Secret;

/// Longest SPIFFE id accepted (the SPIFFE standard's limit).
const MAX_SPIFFE_ID_BYTES: usize = 2048;

/// Longest operator name, in bytes.
const MAX_NAME_BYTES: usize = 64;

/// The lines that hold an entry, numbered from 1.
fn entries(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
}

/// The filter's token file: one token per line, at least one.
pub fn tokens(text: &str) -> Result<Vec<Secret>, String> {
    let mut tokens: Vec<Secret> = Vec::new();
    for (at, line) in entries(text) {
        if !line.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("line {at}: a token is visible ASCII"));
        }
        if tokens.iter().any(|t| t.expose() == line) {
            return Err(format!("line {at}: repeats a token"));
        }
        tokens.push(Secret::new(line));
    }
    if tokens.is_empty() {
        return Err("no token in the file".to_owned());
    }
    Ok(tokens)
}

/// The workloads file: one SPIFFE id per line, as [`workload_ids`] checks them.
pub fn workloads(text: &str) -> Result<Vec<Arc<str>>, String> {
    workload_ids(entries(text).map(|(_, line)| line))
}

/// At least one id, each a `spiffe://` id listed once.
pub fn workload_ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<Vec<Arc<str>>, String> {
    let mut allowed: Vec<Arc<str>> = Vec::new();
    for id in ids {
        let id = id.trim();
        let spiffe = id.starts_with("spiffe://")
            && id.len() <= MAX_SPIFFE_ID_BYTES
            && id
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b",;\"\\".contains(&b));
        if !spiffe {
            return Err(format!(
                "{id:?} is not a SPIFFE id (spiffe://trust-domain/path, visible ASCII, no `,;\"\\`)"
            ));
        }
        if allowed.iter().any(|a| **a == *id) {
            return Err(format!("{id} is listed twice"));
        }
        allowed.push(id.into());
    }
    if allowed.is_empty() {
        return Err("--trust-xfcc needs at least one allowed SPIFFE id".to_owned());
    }
    Ok(allowed)
}

/// The operators' token file: `name:token` lines (none is allowed).
pub fn operators(text: &str) -> Result<Vec<(String, Secret)>, String> {
    let mut named: Vec<(String, Secret)> = Vec::new();
    for (at, line) in entries(text) {
        let (name, token) = line
            .split_once(':')
            .ok_or_else(|| format!("line {at}: expected `name:token`"))?;
        let name = name.trim();
        if name.is_empty()
            || name.len() > MAX_NAME_BYTES
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
        {
            return Err(format!(
                "line {at}: an operator name is 1 to {MAX_NAME_BYTES} letters, digits or `._@-`"
            ));
        }
        if token.is_empty() {
            return Err(format!("line {at}: empty token"));
        }
        if named.iter().any(|(n, t)| n == name || t.expose() == token) {
            return Err(format!("line {at}: repeats an operator name or a token"));
        }
        named.push((name.to_owned(), Secret::new(token)));
    }
    Ok(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
    const B: &str = "spiffe://cluster.local/ns/shop/sa/cart";

    #[test]
    fn a_token_file_holds_the_current_and_the_next_token() {
        let tokens = tokens("# current\nold-token\n\n# next\nnew-token\n").unwrap();
        let values: Vec<_> = tokens.iter().map(Secret::expose).collect();
        assert_eq!(values, ["old-token", "new-token"]);
    }

    #[test]
    fn bad_token_files_are_refused_without_echoing_tokens() {
        for bad in ["", "# only a comment\n", "s3cr3t\ns3cr3t", "s3c r3t"] {
            let err = tokens(bad).unwrap_err();
            assert!(!err.contains("s3c"), "{err}");
        }
    }

    #[test]
    fn ids_are_spiffe_ids_listed_once() {
        assert_eq!(workload_ids([A, B]).unwrap().len(), 2);
        assert_eq!(
            workloads(&format!("# onboarded\n{A}\n\n{B}\n"))
                .unwrap()
                .len(),
            2
        );
        for bad in [
            vec![],
            vec![A, A],
            vec!["https://x/y"],
            vec!["spiffe://x/a,b"],
            vec!["spiffe://x/a;URI=spiffe://y"],
        ] {
            assert!(workload_ids(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn operator_lines_name_their_operators() {
        let named = operators("# operators\nalice:a-token\n\nbob.smith:b:with:colons\n").unwrap();
        let names: Vec<_> = named.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["alice", "bob.smith"]);
        assert_eq!(named[1].1.expose(), "b:with:colons");
    }

    #[test]
    fn malformed_operator_lines_are_refused_without_echoing_tokens() {
        for bad in [
            "no-colon",
            ":s3cr3t",
            "a b:s3cr3t",
            "a:",
            "a:s3cr3t\na:other",
            "a:s3cr3t\nb:s3cr3t",
        ] {
            let err = operators(bad).unwrap_err();
            assert!(!err.contains("s3cr3t"), "{err}");
        }
    }
}
