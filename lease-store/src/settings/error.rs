//! Why the settings cannot be used: one error type for flags, secrets and the settings
//! files, each message one line naming the flag, variable or file at fault.

use std::path::PathBuf;

/// Why the settings cannot be used. Each message names the flag or variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `serve` was started with no way to authenticate the filter.
    #[error(
        "no caller credential configured: set KEYFLIGHT_TOKEN or KEYFLIGHT_TOKEN_FILE (or --token / --token-file), or --trust-xfcc with --workload or --workloads-file"
    )]
    MissingToken,
    /// The filter token file does not parse (the reason names the line, never a token).
    #[error("token file {}: {reason}", path.display())]
    TokenFile {
        /// The file given.
        path: PathBuf,
        /// What is wrong, by line.
        reason: String,
    },
    /// The `--workload` list is unusable.
    #[error("invalid --workload: {reason}")]
    Workloads {
        /// What is wrong.
        reason: String,
    },
    /// The workloads file cannot be read or does not parse.
    #[error("workloads file {}: {reason}", path.display())]
    WorkloadsFile {
        /// The file given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Both the inline and the file form of a secret were given.
    #[error("{name} is set both inline and as a file; set only one")]
    SecretGivenTwice {
        /// The variable's name.
        name: &'static str,
    },
    /// A secret file could not be read.
    #[error("cannot read {name} from {}: {source}", path.display())]
    SecretFile {
        /// The variable's name.
        name: &'static str,
        /// The file given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A secret is empty (after trimming the trailing newline of a file).
    #[error("{name} is empty")]
    EmptySecret {
        /// The variable's name.
        name: &'static str,
    },
    /// An admin token equals the filter token, so the filter could call admin endpoints.
    #[error(
        "every admin token (KEYFLIGHT_ADMIN_TOKEN, KEYFLIGHT_ADMIN_TOKENS_FILE) must differ from KEYFLIGHT_TOKEN"
    )]
    AdminTokenReused,
    /// The admin token file does not parse (the reason names the line, never a token).
    #[error("admin token file {}: {reason}", path.display())]
    AdminTokensFile {
        /// The file given.
        path: PathBuf,
        /// What is wrong, by line.
        reason: String,
    },
    /// A database URL lets the store's connection run in cleartext.
    #[error(
        "{setting} has sslmode={mode}, which lets the connection to Postgres run in cleartext: \
         use sslmode=verify-full with sslrootcert, or pass --allow-plaintext-database \
         (KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE) on a network you trust \
         (docs/configuration.md#tls-to-postgres)"
    )]
    CleartextDatabase {
        /// The flag and variable of the URL.
        setting: &'static str,
        /// Its `sslmode` (`prefer` when it gives none).
        mode: &'static str,
    },
    /// A tunable is out of range.
    #[error("invalid --{flag}: {reason}")]
    Invalid {
        /// The flag at fault.
        flag: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}
