//! `keyflight-bench`: keyflight measured side by side with Envoy and Postgres themselves.
//!
//! `keyflight-bench suite` (what `make bench` runs) starts its own stack — durable
//! Postgres, lease-store, demo upstream, an Envoy with the keyflight filter and one without
//! — runs every scenario of issue 5 interleaved with its baseline, prints one table and
//! writes it as JSON (default `target/bench/results.json`).
//!
//! `keyflight-bench load --url … -H 'name: value' …` drives any HTTP endpoint with the same
//! closed-loop driver, so the workload can be aimed at another idempotency proxy; `{unique}`
//! in a header or the body becomes a fresh value per request.
//!
//! Module map: [`http`] (the lean client), [`workload`] (what one iteration does), [`load`]
//! (the closed-loop driver), [`stats`] (histograms, percentiles, ratios), [`pgbench`] (the
//! Postgres baseline from the store's own SQL), [`procfs`] (CPU and memory), [`envoy`] and
//! [`stack`] (the processes under test), [`rotation`] (interleaving), [`first_time`] (P1,
//! P4–P6), [`large_body`] (P7, P8), [`replays`] (P2), [`native`] (N1–N3, the native
//! adapter beside the Wasm filter), [`wake`] (P3), [`flood`] (P10), [`floor`] (the
//! physical floor: journal, edge and latency, and each first-time row's fraction of it),
//! [`selection`] (`--only`, `--compare-store`), [`targets`] (each row's target and the issue
//! that set it), [`suite`] (the whole run), [`report`] (table and JSON).

mod envoy;
mod error;
mod first_time;
mod flood;
mod floor;
mod http;
mod large_body;
mod load;
mod native;
mod pgbench;
mod procfs;
mod redis;
mod replays;
mod report;
mod rotation;
mod selection;
mod stack;
mod stats;
mod suite;
mod targets;
mod wake;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::error::BenchError;
use crate::load::{Bounds, UniqueSource};
use crate::rotation::Schedule;
use crate::stats::Percentiles;
use crate::workload::{RequestTemplate, StoreCycle, Workload};

/// keyflight's benchmark.
#[derive(Debug, Parser)]
#[command(name = "keyflight-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a stack, run P1–P4 and the comparisons, print the table, write JSON.
    Suite {
        /// Measured rounds per contender (interleaved with the others).
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Seconds per round.
        #[arg(long, default_value_t = 4)]
        round_secs: u64,
        /// Seconds of the warm-up round.
        #[arg(long, default_value_t = 1)]
        warmup_secs: u64,
        /// P1/P4 concurrencies.
        #[arg(long, value_delimiter = ',', default_value = "1,16")]
        concurrency: Vec<usize>,
        /// P2 concurrency.
        #[arg(long, default_value_t = 16)]
        replay_concurrency: usize,
        /// P3 followers per round.
        #[arg(long, default_value_t = 32)]
        followers: usize,
        /// P3 rounds.
        #[arg(long, default_value_t = 10)]
        wake_rounds: usize,
        /// Where the JSON goes.
        #[arg(long, default_value = "target/bench/results.json")]
        out: PathBuf,
        /// A remark about the machine, kept with the results (e.g. "shared with builds").
        #[arg(long)]
        note: Option<String>,
        /// Measure only these rows (e.g. `p1,p4,p6`), with just the contenders they need.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// A second lease-store, `LABEL:ENV=VALUE[,ENV=VALUE…]` (e.g. `'batch off:KEYFLIGHT_BATCH_MAX=1'`),
        /// whose store cycle and guarded POST join the P1/P4 rotation: an A/B in one run.
        #[arg(long)]
        compare_store: Option<selection::StoreVariant>,
    },
    /// Drive one HTTP endpoint at fixed concurrency and print rps and latency.
    Load {
        /// `http://host:port/path`.
        #[arg(long)]
        url: String,
        /// Request method.
        #[arg(long, default_value = "POST")]
        method: String,
        /// A header, `name: value` (repeatable); `{unique}` becomes a fresh value.
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// Request body; `{unique}` becomes a fresh value.
        #[arg(long, default_value = "")]
        body: String,
        /// The status a successful answer has.
        #[arg(long, default_value_t = 200)]
        expect_status: u16,
        /// Requests in flight.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Seconds to run.
        #[arg(long, default_value_t = 5)]
        duration_secs: u64,
        /// Requests after which to stop.
        #[arg(long, default_value_t = u64::MAX)]
        max_requests: u64,
    },
    /// Serve as the edge floor's stub lease-store: every claim won, every finalize 200, at
    /// once and without a database (the suite starts it; never a configuration).
    #[command(hide = true)]
    StubStore {
        /// `host:port` to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
    },
    /// Drive P1's claim+finalize cycle against a running lease-store (for profiling it).
    Cycle {
        /// The lease-store's `host:port`.
        #[arg(long)]
        store: String,
        /// The filter's bearer token.
        #[arg(long, env = "KEYFLIGHT_TOKEN")]
        token: String,
        /// Cycles in flight.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Seconds to run.
        #[arg(long, default_value_t = 5)]
        duration_secs: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("keyflight-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keyflight-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<(), BenchError> {
    match command {
        Command::Suite {
            rounds,
            round_secs,
            warmup_secs,
            concurrency,
            replay_concurrency,
            followers,
            wake_rounds,
            out,
            note,
            only,
            compare_store,
        } => {
            let work_dir = out
                .parent()
                .map_or_else(|| PathBuf::from("target/bench"), PathBuf::from);
            let options = suite::SuiteOptions {
                schedule: Schedule {
                    rounds,
                    round: Duration::from_secs(round_secs),
                    warmup: Duration::from_secs(warmup_secs),
                    max_requests: u64::MAX,
                },
                concurrencies: concurrency,
                replay_concurrency,
                followers,
                wake_rounds,
                work_dir,
                machine_note: note,
                selection: selection::Selection::of(&only)?,
                compare_store,
            };
            let report = suite::run(&options).await?;
            println!("{}", report.table());
            report.write_json(&out)?;
            println!("written: {}", out.display());
            Ok(())
        }
        Command::Load {
            url,
            method,
            headers,
            body,
            expect_status,
            concurrency,
            duration_secs,
            max_requests,
        } => {
            let template = RequestTemplate::parse(&url, &method, &headers, &body, expect_status)?;
            let unique = Arc::new(UniqueSource::new(format!("load-{}", std::process::id())));
            let workload = Arc::new(Workload::Request(template));
            let bounds = Bounds {
                duration: Duration::from_secs(duration_secs),
                max_requests,
            };
            let result = load::run(workload, unique, concurrency, bounds, None).await?;
            print_result(&result);
            Ok(())
        }
        Command::StubStore { listen } => floor::stub::serve(listen).await,
        Command::Cycle {
            store,
            token,
            concurrency,
            duration_secs,
        } => {
            let cycle = StoreCycle::new(store, &token)?;
            let unique = Arc::new(UniqueSource::new(format!("cycle-{}", std::process::id())));
            let bounds = Bounds {
                duration: Duration::from_secs(duration_secs),
                max_requests: u64::MAX,
            };
            let workload = Arc::new(Workload::StoreCycle(cycle));
            let result = load::run(workload, unique, concurrency, bounds, None).await?;
            print_result(&result);
            Ok(())
        }
    }
}

/// One line: successes, errors, rate and latency percentiles of a round.
fn print_result(result: &load::RoundResult) {
    let p = Percentiles::of(&result.histogram);
    println!(
        "{} ok, {} errors in {:.2} s: {:.0} rps; p50 {} ms, p99 {} ms, p99.9 {} ms{}",
        result.ok,
        result.errors,
        result.elapsed.as_secs_f64(),
        stats::rate(result.ok, result.elapsed),
        p.map_or("—".into(), |p| format!("{:.2}", p.p50_ms)),
        p.map_or("—".into(), |p| format!("{:.2}", p.p99_ms)),
        p.map_or("—".into(), |p| format!("{:.2}", p.p999_ms)),
        result
            .first_error
            .as_ref()
            .map_or_else(String::new, |e| format!("; first error: {e}"))
    );
}
