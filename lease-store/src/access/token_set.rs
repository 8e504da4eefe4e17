//! The edge filter's bearer tokens: a set, so a token can be rotated with no outage
//! (`docs/configuration.md#caller-identity`).
//!
//! `--token-file` holds one token per line (`crate::settings::files`): the
//! current token and, during a rotation, the next one. It is re-read when it changes
//! (`watched_file.rs`, on the calls that present a token), so adding the next token, then
//! removing the old one, needs no restart; a file that holds no token keeps the previous
//! set. The inline `--token` is one fixed token. Every token is
//! compared in constant time, and every one is compared, so the time taken does not tell
//! which one matched; tokens are never logged.

use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq;

use super::watched_file::{FileKind, RECHECK, WatchedFile};
use crate::settings::{ConfigError, FilterTokens, Secret, files};

/// The filter tokens the store accepts.
#[derive(Debug)]
pub struct TokenSet {
    source: Source,
}

#[derive(Debug)]
enum Source {
    Inline(Secret),
    File(WatchedFile<Vec<Secret>>),
}

/// How a token file is read and logged (a count, never a token).
static TOKEN_FILE: FileKind<Vec<Secret>> = FileKind {
    read,
    summary: |tokens| format!("{} tokens", tokens.len()),
    reloaded: "filter tokens reloaded",
    unusable: "filter token file unusable; keeping the previous tokens",
    recheck: RECHECK,
};

impl TokenSet {
    /// The set `settings` name, its file read now.
    pub fn open(settings: FilterTokens) -> Result<Self, ConfigError> {
        match settings {
            FilterTokens::Inline(token) => Ok(TokenSet::inline(token)),
            FilterTokens::File(path) => TokenSet::from_file(path),
        }
    }

    /// One fixed token.
    pub fn inline(token: Secret) -> Self {
        TokenSet {
            source: Source::Inline(token),
        }
    }

    /// The tokens of `path`, read now; a file that does not parse or holds none fails.
    pub fn from_file(path: PathBuf) -> Result<Self, ConfigError> {
        Ok(TokenSet {
            source: Source::File(WatchedFile::open(path, &TOKEN_FILE)?),
        })
    }

    /// Whether `presented` is one of the tokens (re-reading a changed file first).
    pub fn contains(&self, presented: &[u8]) -> bool {
        match &self.source {
            Source::Inline(token) => matches(presented, token),
            // Every token is compared: the time taken does not tell which one matched.
            Source::File(file) => file.with(|tokens| {
                tokens
                    .iter()
                    .fold(false, |found, token| matches(presented, token) | found)
            }),
        }
    }

    /// Whether any token of the set equals one `other` accepts (a start-up check).
    pub fn overlaps(&self, other: impl Fn(&Secret) -> bool) -> bool {
        match &self.source {
            Source::Inline(token) => other(token),
            Source::File(file) => file.with(|tokens| tokens.iter().any(other)),
        }
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
    files::tokens(&text).map_err(|reason| ConfigError::TokenFile {
        path: path.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_accepts_both_tokens_then_only_the_next() {
        let path = std::env::temp_dir().join(format!("keyflight-tokens-{}", std::process::id()));
        std::fs::write(&path, "one\n").unwrap();
        let set = TokenSet::from_file(path.clone()).unwrap();
        let Source::File(file) = &set.source else {
            unreachable!("a file source")
        };
        assert!(set.contains(b"one"));
        std::fs::write(&path, "one\ntwo-longer\n").unwrap();
        file.check_next_call();
        assert!(set.contains(b"two-longer"));
        assert!(set.contains(b"one"));
        std::fs::write(&path, "two-longer\n").unwrap();
        file.check_next_call();
        assert!(!set.contains(b"one"));
        std::fs::remove_file(&path).unwrap();
    }
}
