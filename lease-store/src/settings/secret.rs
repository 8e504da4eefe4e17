//! Bearer tokens given inline or as a file (the shape Kubernetes secrets mount as).

use std::path::Path;

use super::ConfigError;

/// A bearer token. Its `Debug` form never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a token value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The token's bytes, for constant-time comparison and for sending.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Reads a secret given inline or as a file; `None` when neither is set.
///
/// A file's trailing newline (`echo token > file`) is not part of the token.
pub fn resolve_secret(
    name: &'static str,
    inline: Option<&str>,
    file: Option<&Path>,
) -> Result<Option<Secret>, ConfigError> {
    let value = match (inline, file) {
        (Some(_), Some(_)) => return Err(ConfigError::SecretGivenTwice { name }),
        (None, None) => return Ok(None),
        (Some(value), None) => value.to_owned(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|source| ConfigError::SecretFile {
                name,
                path: path.to_owned(),
                source,
            })?
            .trim_end_matches(['\n', '\r'])
            .to_owned(),
    };
    if value.is_empty() {
        return Err(ConfigError::EmptySecret { name });
    }
    Ok(Some(Secret(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_files_lose_their_trailing_newline() {
        let path = std::env::temp_dir().join(format!("keyflight-secret-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").expect("write temp file");
        let secret = resolve_secret("T", None, Some(&path)).expect("readable");
        std::fs::remove_file(&path).expect("remove temp file");
        assert_eq!(secret.map(|s| s.expose().to_owned()), Some("s3cret".into()));
    }

    #[test]
    fn secrets_reject_both_forms_and_empty_values() {
        assert!(matches!(
            resolve_secret("T", Some("a"), Some(Path::new("/nonexistent"))),
            Err(ConfigError::SecretGivenTwice { .. })
        ));
        assert!(matches!(
            resolve_secret("T", Some(""), None),
            Err(ConfigError::EmptySecret { .. })
        ));
        assert!(matches!(resolve_secret("T", None, None), Ok(None)));
    }

    #[test]
    fn secrets_do_not_debug_print() {
        assert_eq!(
            format!("{:?}", Secret::new("hunter2")),
            "Secret(<redacted>)"
        );
    }
}
