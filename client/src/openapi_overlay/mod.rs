//! `keyflight openapi-overlay`: keyflight's contract written into a service's OpenAPI
//! document (`docs/operations.md#the-contract-in-a-services-openapi`).
//!
//! The plugin configuration goes through the filter's own parser, and each operation is
//! matched by the filter's own policy matcher ([`operations`]), so the command and the
//! proxies agree on which operations are guarded; what a guarded operation may answer is
//! the filter's own list ([`keyflight_filter::contract`]). The result is an OAI Overlay
//! 1.0 document ([`overlay`]) and, with `--patched`, the document with it applied
//! ([`apply`]).

pub mod apply;
pub mod document;
pub mod operations;
pub mod overlay;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use clap::Args;
use keyflight_filter::config::{Config, Mode, parse_plugin_config};
use serde_yaml_ng::Value;

use self::document::{Format, field};
use self::operations::{Operation, Site};

/// Flags of `keyflight openapi-overlay`.
#[derive(Debug, Args)]
pub struct OpenapiOverlayArgs {
    /// The service's OpenAPI document (3.0 or 3.1, JSON or YAML).
    #[arg(long)]
    openapi: PathBuf,
    /// The keyflight plugin configuration (JSON) of the proxies in front of it.
    #[arg(long)]
    plugin_config: PathBuf,
    /// The `:authority` requests to the service carry (needed when a policy matches one).
    #[arg(long)]
    authority: Option<String>,
    /// The path prefix of every operation as requests carry it (default: the path of the
    /// document's first server URL).
    #[arg(long)]
    base_path: Option<String>,
    /// Where to write the overlay (default: standard output).
    #[arg(long)]
    overlay: Option<PathBuf>,
    /// Also write the document with the overlay applied here.
    #[arg(long)]
    patched: Option<PathBuf>,
}

/// Why `openapi-overlay` failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenapiOverlayError {
    /// A file could not be read or written, or is not what it should be.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The document and configuration cannot be reconciled.
    #[error("{0}")]
    Refused(String),
}

/// Everything the command computes, before anything is written.
#[derive(Debug)]
pub struct Outcome {
    /// Every operation and its guarding policy.
    pub operations: Vec<Operation>,
    /// The overlay.
    pub overlay: Value,
    /// The document with the overlay applied.
    pub patched: Value,
    /// Where the service's own documentation was kept.
    pub notes: Vec<String>,
}

/// The overlay for `doc` under `config`, and the patched document.
pub fn compute(
    doc: &Value,
    config: &Config,
    site: &Site,
    extends: &str,
) -> Result<Outcome, OpenapiOverlayError> {
    let version = field(doc, "openapi").and_then(Value::as_str).unwrap_or("");
    if !(version.starts_with("3.0.") || version.starts_with("3.1.")) {
        return Err(OpenapiOverlayError::Refused(format!(
            "openapi {version:?}: only OpenAPI 3.0 and 3.1 documents are read"
        )));
    }
    if config.mode == Mode::DryRun {
        return Err(OpenapiOverlayError::Refused(
            "the configuration is in mode dry_run, where keyflight answers nothing itself: \
             run this on the enforce configuration"
                .to_owned(),
        ));
    }
    let operations =
        operations::operations(doc, config, site).map_err(OpenapiOverlayError::Refused)?;
    let generated = overlay::generate(doc, config, &operations, extends);
    let mut patched = doc.clone();
    apply::apply(&mut patched, &generated.overlay)
        .map_err(|e| OpenapiOverlayError::Refused(e.to_string()))?;
    Ok(Outcome {
        operations,
        overlay: generated.overlay,
        patched,
        notes: generated.notes,
    })
}

/// Writes the overlay (and the patched document); one line per guarded operation and
/// every note go to standard error.
pub fn run(args: OpenapiOverlayArgs) -> Result<(), OpenapiOverlayError> {
    let file = |path: &Path, message: String| OpenapiOverlayError::File {
        path: path.to_owned(),
        message,
    };
    let config_bytes =
        std::fs::read(&args.plugin_config).map_err(|e| file(&args.plugin_config, e.to_string()))?;
    let config =
        parse_plugin_config(&config_bytes).map_err(|e| file(&args.plugin_config, e.to_string()))?;
    let text =
        std::fs::read_to_string(&args.openapi).map_err(|e| file(&args.openapi, e.to_string()))?;
    let (doc, format) = document::parse(&text).map_err(|e| file(&args.openapi, e))?;
    let extends = args
        .openapi
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let site = Site {
        authority: args.authority,
        base_path: args.base_path,
    };
    let outcome = compute(&doc, &config, &site, &extends)?;
    for operation in &outcome.operations {
        if let Some(policy) = &operation.policy {
            eprintln!(
                "guarded: {} {} (policy {}, matched as {})",
                operation.method.to_uppercase(),
                operation.path,
                policy.name,
                operation.sample
            );
        }
    }
    for note in &outcome.notes {
        eprintln!("note: {note}");
    }
    let overlay = render(&outcome.overlay, format)?;
    match &args.overlay {
        Some(path) => std::fs::write(path, overlay).map_err(|e| file(path, e.to_string()))?,
        None => print!("{overlay}"),
    }
    if let Some(path) = &args.patched {
        let patched = render(&outcome.patched, format)?;
        std::fs::write(path, patched).map_err(|e| file(path, e.to_string()))?;
    }
    Ok(())
}

fn render(value: &Value, format: Format) -> Result<String, OpenapiOverlayError> {
    document::render(value, format).map_err(OpenapiOverlayError::Refused)
}
