//! The `lease-store` command line: one binary, six jobs (`docs/records.md#the-api`,
//! `docs/records.md#operators`).
//!
//! - `serve` runs the HTTP API ([`serve`]),
//! - `migrate` applies the schema migrations and exits ([`migrate`]),
//! - `records …` is the operator's client for the admin API ([`records`]),
//! - `fingerprint` explains a request's fingerprint and scope (K5, [`fingerprint`]),
//! - `recipe-diff` says what a plugin configuration change does to identities ([`recipe_diff`]),
//! - `openapi-overlay` writes the guarded operations' contract into a service's OpenAPI
//!   document ([`openapi_overlay`]).
//!
//! Each subcommand returns a [`CliError`]; `main` prints it as one line and
//! exits non-zero, so scripts and operators get a clear, greppable failure.

pub mod fingerprint;
pub mod migrate;
pub mod openapi_overlay;
pub mod recipe_diff;
pub mod records;
pub mod serve;

use clap::{Parser, Subcommand};

use crate::config::{ConfigError, MigrateArgs, MoveSlotArgs, ServeArgs};
use crate::store::StoreError;

/// keyflight lease-store: idempotency leases over Postgres.
#[derive(Debug, Parser)]
#[command(name = "lease-store", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API v1.
    Serve(Box<ServeArgs>),
    /// Apply pending schema migrations (and grant the runtime role), print what was done, and exit.
    Migrate(MigrateArgs),
    /// Move one slot of a partitioned database to another partition (adding a partition).
    MoveSlot(MoveSlotArgs),
    /// Inspect, resolve or erase records through a running store's admin API.
    Records(records::RecordsArgs),
    /// Print a request's canonical form and fingerprint (and optionally its scope).
    Fingerprint(Box<fingerprint::FingerprintArgs>),
    /// Print what a plugin configuration change does to identities; fail when it is unsafe.
    RecipeDiff(recipe_diff::RecipeDiffArgs),
    /// Write an OpenAPI Overlay adding keyflight's header and answers to the guarded operations.
    OpenapiOverlay(openapi_overlay::OpenapiOverlayArgs),
}

/// Why a subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Invalid settings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be used.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `serve --require-least-privilege` runs as a role that can do more than serving needs.
    #[error(
        "the database role can do more than serving needs ({}); serve as the runtime role \
         granted by `lease-store migrate --grant-runtime` (docs/threat-model.md#the-database-roles)",
        .0.join("; ")
    )]
    Privileged(Vec<String>),
    /// A `records` call failed.
    #[error(transparent)]
    Records(#[from] records::RecordsError),
    /// `fingerprint` input is unusable.
    #[error(transparent)]
    Fingerprint(#[from] fingerprint::FingerprintError),
    /// `recipe-diff` found an unsafe change, or could not read a configuration.
    #[error(transparent)]
    RecipeDiff(#[from] recipe_diff::RecipeDiffError),
    /// `openapi-overlay` could not read, reconcile or write a document.
    #[error(transparent)]
    OpenapiOverlay(#[from] openapi_overlay::OpenapiOverlayError),
}

/// Runs the chosen subcommand.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Migrate(args) => migrate::run(args).await,
        Command::MoveSlot(args) => migrate::move_slot(args).await,
        Command::Records(args) => Ok(records::run(args).await?),
        Command::Fingerprint(args) => Ok(fingerprint::run(*args)?),
        Command::RecipeDiff(args) => Ok(recipe_diff::run(args)?),
        Command::OpenapiOverlay(args) => Ok(openapi_overlay::run(args)?),
    }
}
