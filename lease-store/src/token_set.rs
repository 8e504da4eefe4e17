//! The edge filter's bearer tokens: a set, so a token can be rotated with no outage
//! (`docs/configuration.md#caller-identity`).
//!
//! `--token-file` holds one token per line (blank lines and `#` comments skipped): the
//! current token and, during a rotation, the next one. The file is checked at most once a
//! second, on the calls that present a token, and re-read when its modification time or
//! size changed (a Kubernetes Secret volume swaps the file whole), so adding the next
//! token, then removing the old one, needs no restart. A file that no longer parses, or
//! holds no token, keeps the previous set and says so in the log: a bad edit locks nobody
//! out and lets nobody new in. The inline `--token` is one fixed token. Every token is
//! compared in constant time, and every one is compared, so the time taken does not tell
//! which one matched; tokens are never logged.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use subtle::ConstantTimeEq;

use crate::admin_tokens::stamp;
use crate::config::{ConfigError, Secret};

/// How often a token file is checked for a change.
const RECHECK: Duration = Duration::from_secs(1);

/// The filter tokens the store accepts.
#[derive(Debug)]
pub struct TokenSet {
    source: Source,
}

#[derive(Debug)]
enum Source {
    Inline(Secret),
    File {
        path: PathBuf,
        loaded: Mutex<Loaded>,
    },
}

#[derive(Debug)]
struct Loaded {
    checked: Instant,
    stamp: Option<(SystemTime, u64)>,
    tokens: Vec<Secret>,
}

impl TokenSet {
    /// One fixed token.
    pub fn inline(token: Secret) -> Self {
        TokenSet {
            source: Source::Inline(token),
        }
    }

    /// The tokens of `path`, read now; a file that does not parse or holds none fails.
    pub fn from_file(path: PathBuf) -> Result<Self, ConfigError> {
        let tokens = read(&path)?;
        let loaded = Loaded {
            checked: Instant::now(),
            stamp: stamp(&path),
            tokens,
        };
        Ok(TokenSet {
            source: Source::File {
                path,
                loaded: Mutex::new(loaded),
            },
        })
    }

    /// Whether `presented` is one of the tokens (re-reading a changed file first).
    pub fn contains(&self, presented: &[u8]) -> bool {
        match &self.source {
            Source::Inline(token) => matches(presented, token),
            Source::File { path, loaded } => {
                let mut loaded = loaded.lock().unwrap_or_else(|e| e.into_inner());
                reload_if_changed(path, &mut loaded, Instant::now());
                // Every token is compared: the time taken does not tell which one matched.
                loaded
                    .tokens
                    .iter()
                    .fold(false, |found, token| matches(presented, token) | found)
            }
        }
    }

    /// Whether any token of the set equals one `other` accepts (a start-up check).
    pub fn overlaps(&self, other: impl Fn(&Secret) -> bool) -> bool {
        match &self.source {
            Source::Inline(token) => other(token),
            Source::File { loaded, .. } => loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .tokens
                .iter()
                .any(other),
        }
    }
}

fn reload_if_changed(path: &Path, loaded: &mut Loaded, now: Instant) {
    if now.duration_since(loaded.checked) < RECHECK {
        return;
    }
    loaded.checked = now;
    let current = stamp(path);
    if current == loaded.stamp {
        return;
    }
    loaded.stamp = current;
    match read(path) {
        Ok(tokens) => {
            tracing::info!(tokens = tokens.len(), file = %path.display(), "filter tokens reloaded");
            loaded.tokens = tokens;
        }
        Err(e) => tracing::warn!(
            error = %e,
            "filter token file unusable; keeping the previous tokens"
        ),
    }
}

fn matches(presented: &[u8], expected: &Secret) -> bool {
    presented.ct_eq(expected.expose().as_bytes()).into()
}

/// Reads and parses a token file.
fn read(path: &Path) -> Result<Vec<Secret>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        name: "KEYFLIGHT_TOKEN_FILE",
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|reason| ConfigError::TokenFile {
        path: path.to_owned(),
        reason,
    })
}

/// One token per line; the error names the line, never a token.
fn parse(text: &str) -> Result<Vec<Secret>, String> {
    let mut tokens: Vec<Secret> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("line {}: a token is visible ASCII", index + 1));
        }
        if tokens.iter().any(|t| t.expose() == line) {
            return Err(format!("line {}: repeats a token", index + 1));
        }
        tokens.push(Secret::new(line));
    }
    if tokens.is_empty() {
        return Err("no token in the file".to_owned());
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holds_the_current_and_the_next_token() {
        let tokens = parse("# current\nold-token\n\n# next\nnew-token\n").unwrap();
        let values: Vec<_> = tokens.iter().map(Secret::expose).collect();
        assert_eq!(values, ["old-token", "new-token"]);
    }

    #[test]
    fn bad_files_are_refused_without_echoing_tokens() {
        for bad in ["", "# only a comment\n", "s3cr3t\ns3cr3t", "s3c r3t"] {
            let err = parse(bad).unwrap_err();
            assert!(!err.contains("s3c"), "{err}");
        }
    }

    #[test]
    fn a_changed_file_is_reread_and_a_broken_one_kept() {
        let path = std::env::temp_dir().join(format!("keyflight-tokens-{}", std::process::id()));
        std::fs::write(&path, "one\n").unwrap();
        let set = TokenSet::from_file(path.clone()).unwrap();
        let Source::File { loaded, .. } = &set.source else {
            unreachable!("a file source")
        };
        // Makes the next call re-check now, without waiting a second.
        let recheck = || loaded.lock().unwrap().checked = Instant::now() - RECHECK;
        assert!(set.contains(b"one"));
        std::fs::write(&path, "one\ntwo-longer\n").unwrap();
        assert!(
            !set.contains(b"two-longer"),
            "checked at most once a second"
        );
        recheck();
        assert!(set.contains(b"two-longer"));
        assert!(set.contains(b"one"));
        std::fs::write(&path, "two-longer\n").unwrap();
        recheck();
        assert!(!set.contains(b"one"));
        std::fs::write(&path, "# emptied by mistake\n").unwrap();
        recheck();
        assert!(set.contains(b"two-longer"), "kept");
        std::fs::remove_file(&path).unwrap();
    }
}
