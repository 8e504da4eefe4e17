//! `keyflight recipe-diff`: what a plugin configuration change does to identities,
//! before it is applied (`docs/operations.md#upgrades`).
//!
//! Both configurations go through the filter's own parser and validation, and the
//! comparison is the filter's ([`keyflight_filter::recipe::diff`]), so the verdict speaks
//! about exactly what the proxies will compute. It prints one line per policy and its
//! changes, and fails (non-zero) when an identity changes without a previous recipe that
//! covers it: a keyed retry crossing that rollout would run again or get 409.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use keyflight_filter::config::{Config, parse_plugin_config};
use keyflight_filter::recipe::{PolicyChange, Verdict, diff};

/// Flags of `keyflight recipe-diff`.
#[derive(Debug, Args)]
pub struct RecipeDiffArgs {
    /// The plugin configuration (JSON) the proxies run now.
    #[arg(long)]
    old: PathBuf,
    /// The plugin configuration (JSON) about to be rolled out.
    #[arg(long)]
    new: PathBuf,
}

/// Why `recipe-diff` failed.
#[derive(Debug, thiserror::Error)]
pub enum RecipeDiffError {
    /// A file could not be read or is not a valid plugin configuration.
    #[error("{path}: {message}")]
    Input {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The change is unsafe for keyed retries; the report was printed.
    #[error("{0} polic(ies) change identities with no previous recipe named (see above)")]
    Unsafe(usize),
}

/// Prints the report; an error when the change is unsafe.
pub fn run(args: RecipeDiffArgs) -> Result<(), RecipeDiffError> {
    let (old, new) = (load(&args.old)?, load(&args.new)?);
    let changes = diff(&old, &new);
    print!("{}", render(&changes));
    match changes
        .iter()
        .filter(|c| c.verdict == Verdict::Unsafe)
        .count()
    {
        0 => Ok(()),
        unsafe_changes => Err(RecipeDiffError::Unsafe(unsafe_changes)),
    }
}

fn load(path: &Path) -> Result<Config, RecipeDiffError> {
    let input = |message: String| RecipeDiffError::Input {
        path: path.to_owned(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| input(e.to_string()))?;
    parse_plugin_config(&bytes).map_err(|e| input(e.to_string()))
}

/// One line per policy (`name: verdict`), then its changes indented.
fn render(changes: &[PolicyChange]) -> String {
    let mut out = String::new();
    for change in changes {
        let _ = writeln!(out, "policy {}: {}", change.policy, change.verdict);
        for line in &change.changes {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}
