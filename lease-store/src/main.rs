//! `lease-store`: one binary for the service and its operator tools (SPEC §6).
//!
//! Parses the command line, sets up logging, runs the subcommand on a tokio
//! runtime and turns a failure into one `lease-store: error: …` line and exit
//! status 1. Logs go to stderr: JSON lines when `KEYFLIGHT_LOG_FORMAT=json`
//! (for log pipelines), human-readable text otherwise; `RUST_LOG` filters
//! them (default `info` for `serve`, `warn` for the one-shot tools, whose
//! output is what they print).

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use keyflight_lease_store::cli::{self, Cli, Command};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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

fn init_logging(default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if std::env::var("KEYFLIGHT_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        builder.json().init();
    } else {
        builder.init();
    }
}
