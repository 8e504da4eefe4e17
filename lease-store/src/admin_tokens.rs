//! The operators' token set: named admin tokens, from a file reloaded when it changes
//! (`docs/records.md#operators`).
//!
//! Each line of `--admin-tokens-file` is `name:token` (blank lines and `#` comments are
//! skipped); the name is the operator's identity in the audit and the logs. The file is
//! checked again when an admin call arrives and its modification time or size changed, so
//! adding or revoking an operator needs no restart; a file that no longer parses keeps the
//! previous set (and says so in the log), so a bad edit locks nobody out and lets nobody
//! in. The single `--admin-token` of earlier releases still works, as the operator `admin`.
//! Tokens are compared in constant time and never logged.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use subtle::ConstantTimeEq;

use crate::config::{ConfigError, Secret};

/// The name the single `--admin-token` acts as.
pub const INLINE_OPERATOR: &str = "admin";

/// Longest operator name, in bytes.
const MAX_NAME_BYTES: usize = 64;

/// Named operator tokens.
#[derive(Debug)]
pub struct AdminTokens {
    inline: Option<Secret>,
    file: Option<PathBuf>,
    loaded: Mutex<Loaded>,
}

#[derive(Debug, Default)]
struct Loaded {
    stamp: Option<(SystemTime, u64)>,
    named: Vec<(String, Secret)>,
}

impl AdminTokens {
    /// The token set of `inline` (as [`INLINE_OPERATOR`]) and `file`, read now.
    pub fn load(inline: Option<Secret>, file: Option<PathBuf>) -> Result<Self, ConfigError> {
        let mut loaded = Loaded::default();
        if let Some(path) = &file {
            loaded.stamp = stamp(path);
            loaded.named = read(path)?;
        }
        Ok(AdminTokens {
            inline,
            file,
            loaded: Mutex::new(loaded),
        })
    }

    /// No operator token at all: the admin API stays closed.
    pub fn is_empty(&self) -> bool {
        self.inline.is_none() && self.file.is_none()
    }

    /// Whether `token` is one of the operators' tokens.
    pub fn contains(&self, token: &Secret) -> bool {
        self.who(token.expose().as_bytes()).is_some()
    }

    /// The operator whose token was presented, if any.
    pub fn who(&self, presented: &[u8]) -> Option<String> {
        let mut found = None;
        if let Some(inline) = &self.inline
            && matches(presented, inline)
        {
            found = Some(INLINE_OPERATOR.to_owned());
        }
        let loaded = self.current();
        // Every token is compared, so the time taken does not tell which one matched.
        for (name, token) in &loaded.named {
            if matches(presented, token) && found.is_none() {
                found = Some(name.clone());
            }
        }
        found
    }

    /// The loaded set, re-read first when the file changed.
    fn current(&self) -> MutexGuard<'_, Loaded> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(path) = &self.file {
            let now = stamp(path);
            if now != loaded.stamp {
                loaded.stamp = now;
                match read(path) {
                    Ok(named) => {
                        tracing::info!(operators = named.len(), file = %path.display(), "admin tokens reloaded");
                        loaded.named = named;
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "admin token file unusable; keeping the previous operators"
                    ),
                }
            }
        }
        loaded
    }
}

fn matches(presented: &[u8], expected: &Secret) -> bool {
    presented.ct_eq(expected.expose().as_bytes()).into()
}

/// The file's modification time and size, what a change is recognised by.
pub(crate) fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Reads and parses a token file.
fn read(path: &Path) -> Result<Vec<(String, Secret)>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        name: "KEYFLIGHT_ADMIN_TOKENS_FILE",
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|reason| ConfigError::AdminTokensFile {
        path: path.to_owned(),
        reason,
    })
}

/// Parses `name:token` lines; the error names the line, never a token.
fn parse(text: &str) -> Result<Vec<(String, Secret)>, String> {
    let mut named: Vec<(String, Secret)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = index + 1;
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

    #[test]
    fn lines_name_their_operators() {
        let named = parse("# operators\nalice:a-token\n\nbob.smith:b:with:colons\n").unwrap();
        let names: Vec<_> = named.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["alice", "bob.smith"]);
        assert_eq!(named[1].1.expose(), "b:with:colons");
    }

    #[test]
    fn malformed_lines_are_refused_without_echoing_tokens() {
        for bad in [
            "no-colon",
            ":s3cr3t",
            "a b:s3cr3t",
            "a:",
            "a:s3cr3t\na:other",
            "a:s3cr3t\nb:s3cr3t",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(!err.contains("s3cr3t"), "{err}");
        }
    }

    #[test]
    fn the_file_is_reloaded_when_it_changes() {
        let path = std::env::temp_dir().join(format!("keyflight-admins-{}", std::process::id()));
        std::fs::write(&path, "alice:one\n").unwrap();
        let tokens = AdminTokens::load(Some(Secret::new("inline")), Some(path.clone())).unwrap();
        assert_eq!(tokens.who(b"one").as_deref(), Some("alice"));
        assert_eq!(tokens.who(b"inline").as_deref(), Some(INLINE_OPERATOR));
        std::fs::write(&path, "bob:two-longer\n").unwrap();
        assert_eq!(tokens.who(b"one"), None);
        assert_eq!(tokens.who(b"two-longer").as_deref(), Some("bob"));
        std::fs::write(&path, "broken line").unwrap();
        assert_eq!(tokens.who(b"two-longer").as_deref(), Some("bob"), "kept");
        std::fs::remove_file(&path).unwrap();
    }
}
