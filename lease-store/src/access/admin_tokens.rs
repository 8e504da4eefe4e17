//! The operators' token set: named admin tokens, from a file reloaded when it changes
//! (`docs/records.md#operators`).
//!
//! Each line of `--admin-tokens-file` is `name:token` (`crate::settings::files`); the name
//! is the operator's identity in the audit and the logs. The file is checked again on every
//! admin call (`watched_file.rs`) and re-read when its modification time or size changed,
//! so adding or revoking an operator needs no restart; a file that no longer parses keeps
//! the previous set (and says so in the log), so a bad edit locks nobody out and lets nobody
//! in. The single `--admin-token` of earlier releases still works, as the operator `admin`.
//! Tokens are compared in constant time and never logged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use subtle::ConstantTimeEq;

use super::watched_file::{FileKind, WatchedFile};
use crate::settings::{AdminTokenSettings, ConfigError, Secret, files};

/// The name the single `--admin-token` acts as.
pub const INLINE_OPERATOR: &str = "admin";

/// Named operator tokens.
#[derive(Debug)]
pub struct AdminTokens {
    inline: Option<Secret>,
    file: Option<WatchedFile<Vec<(String, Secret)>>>,
}

/// How an operators' file is read and logged (a count, never a token). Admin calls are
/// rare, so each one checks the file: a revoked operator is out at once.
static ADMIN_TOKENS_FILE: FileKind<Vec<(String, Secret)>> = FileKind {
    read,
    summary: |named| format!("{} operators", named.len()),
    reloaded: "admin tokens reloaded",
    unusable: "admin token file unusable; keeping the previous operators",
    recheck: Duration::ZERO,
};

impl AdminTokens {
    /// The token set `settings` name, its file read now.
    pub fn open(settings: AdminTokenSettings) -> Result<Self, ConfigError> {
        AdminTokens::load(settings.inline, settings.file)
    }

    /// The token set of `inline` (as [`INLINE_OPERATOR`]) and `file`, read now.
    pub fn load(inline: Option<Secret>, file: Option<PathBuf>) -> Result<Self, ConfigError> {
        let file = file
            .map(|path| WatchedFile::open(path, &ADMIN_TOKENS_FILE))
            .transpose()?;
        Ok(AdminTokens { inline, file })
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
        if let Some(file) = &self.file {
            file.with(|named| {
                // Every token is compared, so the time taken does not tell which one matched.
                for (name, token) in named {
                    if matches(presented, token) && found.is_none() {
                        found = Some(name.clone());
                    }
                }
            });
        }
        found
    }
}

fn matches(presented: &[u8], expected: &Secret) -> bool {
    presented.ct_eq(expected.expose().as_bytes()).into()
}

/// Reads and parses an operators' token file.
fn read(path: &Path) -> Result<Vec<(String, Secret)>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::SecretFile {
        name: "KEYFLIGHT_ADMIN_TOKENS_FILE",
        path: path.to_owned(),
        source,
    })?;
    files::operators(&text).map_err(|reason| ConfigError::AdminTokensFile {
        path: path.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
