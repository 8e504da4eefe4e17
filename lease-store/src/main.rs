//! `lease-store`: one binary for the service and its operator tools (`docs/records.md#the-api`).
//!
//! Parses the command line, sets up logging, runs the subcommand on a tokio
//! runtime and turns a failure into one `lease-store: error: …` line and exit
//! status 1. Logs go to stderr (see `keyflight_lease_store::logging`: JSON
//! lines when `KEYFLIGHT_LOG_FORMAT=json`, `RUST_LOG` filters them, and the
//! dependencies that could print bodies or headers are capped at every
//! level); the default is `info` for `serve` and `warn` for the one-shot
//! tools, whose output is what they print.

use std::process::ExitCode;

use clap::Parser;
use keyflight_lease_store::cli::{self, Cli, Command};
use keyflight_lease_store::logging;

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    });
    let runtime = match cli::runtime(&cli) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("lease-store: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lease-store: error: {e}");
            ExitCode::FAILURE
        }
    }
}
