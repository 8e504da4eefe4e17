//! Settings for `serve`, `migrate`, `move-slot` and `records`: plain data parsed once at
//! start-up from flags and environment (`docs/records.md#the-api`).
//!
//! Flags and environment variables are declared with clap ([`args`]), then checked and
//! turned into plain data ([`ServeSettings`], [`Secret`]) before anything starts: a missing
//! token, a token given twice or an out-of-range tunable fails the process with one clear
//! line ([`ConfigError`]), and the request path never re-checks a setting.
//!
//! Every token can be given inline (`KEYFLIGHT_TOKEN`) or as a file
//! (`KEYFLIGHT_TOKEN_FILE`, the shape Kubernetes secrets mount as); giving
//! both is an error rather than a silent precedence rule. The filter's token file, the
//! workloads file and the operators' token file are settings too ([`credentials`], their
//! contents [`files`]); the live sets that re-read them when they change are built from
//! these settings by [`crate::access`], which this module never imports.

pub mod args;
pub mod credentials;
mod error;
pub mod files;
mod secret;
mod serve;

pub use args::{
    AdminTokenArgs, DEFAULT_HEADER_READ_TIMEOUT, DatabaseArgs, MigrateArgs, MoveSlotArgs, ServeArgs,
};
pub use credentials::{
    AdminTokenSettings, CredentialSettings, FilterTokens, MeshSettings, WorkloadList,
};
pub use error::ConfigError;
pub use secret::{Secret, resolve_secret};
pub use serve::{Limits, RecordBounds, ServeSettings};

#[cfg(test)]
pub(crate) use serve::tests::serve as parse_serve;

/// `Ok` when `ok`, else the flag's one-line complaint.
fn check(ok: bool, flag: &'static str, reason: &'static str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid { flag, reason })
    }
}
