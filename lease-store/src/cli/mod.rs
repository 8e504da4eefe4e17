//! The `lease-store` command line (`docs/records.md#the-api`, `docs/records.md#operators`):
//!
//! - `serve` runs the HTTP API ([`serve`]),
//! - `migrate` applies the schema migrations and exits, `move-slot` moves a partition's
//!   slot ([`migrate`]),
//! - `records …` is the operator's client for the admin API ([`records`]).
//!
//! The tools about the filter's configuration (`fingerprint`, `recipe-diff`,
//! `openapi-overlay`) are the `keyflight` command's (`client/`), so the server does not
//! depend on the filter.
//!
//! Each subcommand returns a [`CliError`]; `main` prints it as one line and
//! exits non-zero, so scripts and operators get a clear, greppable failure.

pub mod migrate;
pub mod records;
pub mod serve;

use clap::{Parser, Subcommand};

use crate::settings::{ConfigError, MigrateArgs, MoveSlotArgs, ServeArgs};
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
}

/// The runtime the subcommand runs on: `serve`'s `--worker-threads` threads, else one per
/// core the process may use (`docs/configuration.md#worker-threads`).
pub fn runtime(cli: &Cli) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(args) = &cli.command
        && let Some(threads) = args.worker_threads()
    {
        builder.worker_threads(threads.get());
    }
    builder.enable_all().build()
}

/// Runs the chosen subcommand.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Migrate(args) => migrate::run(args).await,
        Command::MoveSlot(args) => migrate::move_slot(args).await,
        Command::Records(args) => Ok(records::run(args).await?),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::{ArgAction, CommandFactory, Parser};

    use super::{Cli, runtime};

    /// Variables the shipped manifests set that are not `serve` flags: the log's own.
    const LOGGING_ENV: [&str; 2] = ["RUST_LOG", "KEYFLIGHT_LOG_FORMAT"];

    fn serve(extra: &[&str]) -> Result<Cli, clap::Error> {
        let args = [
            "lease-store",
            "serve",
            "--database-url",
            "postgres://db/keyflight",
        ];
        Cli::try_parse_from(args.iter().chain(extra))
    }

    #[test]
    fn serve_runs_on_as_many_worker_threads_as_it_is_told() {
        let cli = serve(&["--worker-threads", "5"]).expect("valid flags");
        let runtime = runtime(&cli).expect("a runtime");
        assert_eq!(runtime.metrics().num_workers(), 5);
    }

    #[test]
    fn without_the_flag_serve_takes_a_thread_per_core() {
        let cli = serve(&[]).expect("valid flags");
        let runtime = runtime(&cli).expect("a runtime");
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(runtime.metrics().num_workers(), cores);
    }

    #[test]
    fn zero_worker_threads_is_refused_naming_the_flag() {
        let error = serve(&["--worker-threads", "0"]).expect_err("zero threads");
        assert!(error.to_string().contains("--worker-threads"), "{error}");
    }

    /// `serve` as the shipped Deployment runs it: every variable of `configmap.yaml` names a
    /// `serve` setting (a misspelt one would be ignored silently) and its value is valid.
    #[test]
    fn the_shipped_configmap_sets_only_serve_settings_with_valid_values() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/k8s/configmap.yaml");
        let text = std::fs::read_to_string(path).expect("the shipped configmap");
        let configmap: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
        let data: BTreeMap<String, String> =
            serde_yaml_ng::from_value(configmap["data"].clone()).expect("string data");
        let command = Cli::command();
        let serve_command = command.find_subcommand("serve").expect("serve");
        let mut flags = Vec::new();
        for (name, value) in data
            .iter()
            .filter(|(name, _)| !LOGGING_ENV.contains(&name.as_str()))
        {
            let arg = serve_command
                .get_arguments()
                .find(|arg| arg.get_env().is_some_and(|env| env == name.as_str()))
                .unwrap_or_else(|| panic!("{name} in configmap.yaml is no `serve` setting"));
            let flag = format!("--{}", arg.get_long().expect("a long flag"));
            match arg.get_action() {
                ArgAction::SetTrue if value == "true" => flags.push(flag),
                ArgAction::SetTrue => panic!("{name}: a switch is set with \"true\""),
                _ => flags.extend([flag, value.clone()]),
            }
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        serve(&flags).unwrap_or_else(|e| panic!("configmap.yaml's settings: {e}"));
    }

    /// Every `serve` flag is in docs/configuration.md, where operators look it up.
    #[test]
    fn every_serve_flag_is_documented() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let doc = std::fs::read_to_string(path).expect("docs/configuration.md");
        let command = Cli::command();
        let serve_command = command.find_subcommand("serve").expect("serve");
        let missing: Vec<&str> = serve_command
            .get_arguments()
            .filter_map(|arg| arg.get_long())
            .filter(|long| *long != "help" && !doc.contains(&format!("`--{long}`")))
            .collect();
        assert!(missing.is_empty(), "not in configuration.md: {missing:?}");
    }
}
