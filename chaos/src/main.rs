//! `keyflight-chaos` (`make chaos`): a bounded fault-injection run on the two-replica stack,
//! with a checker that reads what happened and says whether the promise held. The shape is
//! Jepsen's: run a workload, break things at random, record every operation's history, then
//! check the history against the model of what is allowed.
//!
//! # What a run does
//!
//! 1. **Starts its own stack** on free ports (`stack.rs`): one Postgres, two lease-stores,
//!    the demo upstream, two Envoys running the real `.wasm` from the shipped
//!    `envoy/two-replicas.yaml` (each Envoy reaches both lease-stores). The plugin guards
//!    keys with `uncertain: hold`, `retry` and (with `--upstream-effects`) `reconcile`
//!    (`policies.rs`), with `lease_ms: 3000`, short enough that faults outlast leases.
//! 2. **Draws a plan from a seed** (`plan.rs`): a new key every 100–300 ms for the
//!    run's duration, each with two or three concurrent first callers spread over both
//!    Envoys (one `host`, so one scope), some of them impatient (a timeout shorter than the
//!    key's upstream delay: they give up mid-request, then retry), a late caller once those
//!    are done, and for a few keys a caller with another body that must get 409. Callers
//!    retry what was not an answer (503, timeout, refused or reset connection).
//! 3. **Runs the workload and the faults together** (`workload.rs`, `faults.rs`): one fault
//!    at a time (or two at once on different parts), randomly chosen and timed: a
//!    lease-store killed (SIGKILL) and restarted, a lease-store frozen (SIGSTOP) past the
//!    filter's 1 s call timeout and resumed, Postgres crashed (`pg_ctl stop -m immediate`)
//!    and restarted, an Envoy killed and restarted on the same ports, a new plugin
//!    configuration pushed to Envoy 0 by LDS, and the link faults (`faults/network.rs`: a
//!    proxy cut off from the stores, a store cut off from Postgres, answers lost one way, a
//!    slow link), for which each Envoy and lease-store runs in its own network namespace,
//!    the proxy-lifecycle faults (`faults/lifecycle.rs`: an Envoy drained then sent
//!    `SIGTERM`, a Wasm module upgrade and rollback, a rolling upgrade of Envoy 1 to the
//!    previous release and back, an Envoy hot restarted: a child on its base id, the parent
//!    draining until it exits), and operator actions (`faults/operator.rs`: an erase or
//!    a resolve through a lease-store's admin API).
//!    The upstream answers some keys with a 303, 302, 422 or 503, resets or runs past the
//!    lease, as each key's query asks.
//! 4. **Heals and checks** (`verify.rs`): waits until every part is ready, reads the demo
//!    upstream's execution log (each execution's key, fence, Envoy and caller attempt),
//!    then sends every key once more through each Envoy (and the conflicting body of each
//!    key whose conflict caller got 409), and reads the evidence lines of every lease-store
//!    and Envoy log (`checker/evidence.rs`).
//! 5. **Judges the history** (`checker/`, pure, with its own corpus of histories) and
//!    prints one table; `target/chaos/<seed>-<time>/` gets `report.json` (every key's
//!    verdict and its evidence), `history.json` (the plan, every attempt with its timing,
//!    Envoy and answer, every execution, every fault, every replay check, the evidence),
//!    the rendered Envoy configs and one log per process (`logs/`). `target/chaos/latest`
//!    points at the newest run.
//!
//! What the judge excuses and what each row of the table means is in `chaos/README.md`
//! ("The evidence and the judge", "Reading the table"). The process exits 1 when any
//! "must be 0" row is not, 0 otherwise.
//!
//! # Replaying a run
//!
//! The seed is printed first and last. `make chaos SEED=N DURATION=…` (or
//! `keyflight-chaos --seed N --duration …`) draws the same plan: the same keys, callers,
//! timeouts and fault sequence. The processes' timing is real, so the history differs in
//! detail; the run's `history.json` is the exact record of what happened.
//!
//! # Narrowing a run
//!
//! The flags are `cli.rs`. `--faults KIND,…` injects only those kinds (`store-kill`, `store-freeze`,
//! `postgres-crash`, `postgres-freeze`, `envoy-kill`, `plugin-push`, `proxy-partition`, `store-db-partition`,
//! `one-way-loss`, `slow-link`, `envoy-drain`, `wasm-upgrade`, `rolling-upgrade`,
//! `envoy-hot-restart`, `operator-erase`, `operator-resolve`, `operator-resolve-failed`;
//! `none` for none) and `--no-give-up` keeps every caller
//! patient (`make chaos CHAOS_FLAGS='--faults envoy-kill --no-give-up'`). `--faults none
//! --no-give-up` is the control run: the happy path alone, which must pass; one kind at a
//! time shows which fault a failure comes from.

mod checker;
mod cli;
mod faults;
mod history;
mod plan;
mod policies;
mod report;
mod stack;
mod verify;
mod workload;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use keyflight_testkit::binaries::workspace_root;
use keyflight_testkit::stack::Stack;

use crate::checker::evidence::Evidence;
use crate::cli::{Cli, default_kinds, replay_command};
use crate::history::{FaultKind, History, Renewal};
use crate::plan::Settings;
use crate::policies::{LEASE_MS, RENEW_INTERVAL_MS, plugin, policy_facts};
use crate::workload::Clock;

/// The `--short` run's duration: with start-up, the callers' tail and the checks, the whole
/// run stays under two minutes.
const SHORT_DURATION: Duration = Duration::from_secs(50);

/// How long after the duration callers may still start a retry.
const RETRY_TAIL: Duration = Duration::from_secs(15);

/// Lease-stores and Envoys.
const REPLICAS: usize = 2;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("keyflight-chaos: {error}");
            ExitCode::from(2)
        }
    }
}

/// One run; `Ok(true)` when the checker found nothing.
async fn run(cli: Cli) -> Result<bool, String> {
    if let Some(dir) = &cli.recheck {
        return recheck(dir);
    }
    let began = Instant::now();
    let duration = if cli.short {
        SHORT_DURATION
    } else {
        cli.duration
    };
    let duration_ms = u64::try_from(duration.as_millis()).map_err(|_| "--duration is too long")?;
    let seed = cli.seed.unwrap_or_else(|| u64::from(rand::random::<u32>()));
    let plugin = plugin(cli.record_after_reply, cli.upstream_effects)?;
    let fault_kinds = match &cli.faults {
        Some(kinds) => kinds.clone(),
        None if cli.ha => default_kinds(&FaultKind::REPLICATED_POSTGRES),
        None => default_kinds(&FaultKind::SINGLE_POSTGRES),
    };
    if !cli.ha && fault_kinds.0.contains(&FaultKind::PrimaryNodeDeath) {
        return Err("primary-node-death needs a replicated Postgres: add --ha".to_owned());
    }
    if cli.ha && fault_kinds.0.contains(&FaultKind::PostgresFreeze) {
        return Err(
            "postgres-freeze freezes a single Postgres or a partition; on a replicated one a \
             frozen primary fails over, which primary-node-death draws: drop it or --ha"
                .to_owned(),
        );
    }
    let own_networks = fault_kinds
        .0
        .iter()
        .any(|kind| FaultKind::NETWORK.contains(kind));
    if cli.ha && cli.partitions > 0 {
        return Err("--ha and --partitions: a partition on Patroni is not built yet".to_owned());
    }
    if cli.partitions > 0 && fault_kinds.0.contains(&FaultKind::RollingUpgrade) {
        return Err(
            "rolling-upgrade runs the previous release's lease-store, which knows no \
             partitions: drop it or --partitions"
                .to_owned(),
        );
    }
    if cli.ha && own_networks {
        return Err(
            "the link faults run on a single Postgres only (the Patroni pair shares the \
             host's network): drop --ha or the link faults"
                .to_owned(),
        );
    }
    let settings = Settings {
        duration_ms,
        lease_ms: LEASE_MS,
        renew_interval_ms: RENEW_INTERVAL_MS,
        call_timeout_ms: plugin["lease_store"]["timeout_ms"].as_u64().unwrap_or(1000),
        replicas: REPLICAS,
        fault_kinds: fault_kinds.0.clone(),
        give_up: !cli.no_give_up,
        partitions: usize::from(cli.partitions),
        reconcile: cli.upstream_effects,
    };
    let plan = plan::draw(seed, &settings);
    if fault_kinds.0.contains(&FaultKind::RollingUpgrade) {
        // Built from git history on first use (minutes), cached after: before the run.
        tokio::task::block_in_place(keyflight_testkit::previous_release::previous_release);
    }
    let out = cli
        .out
        .clone()
        .unwrap_or_else(|| workspace_root().join("target").join("chaos"));
    let dir = out.join(format!("{seed}-{}", unix_ms() / 1000));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    println!(
        "keyflight-chaos: seed {seed}, {} s of faults, {} keys planned; writing {}",
        duration.as_secs(),
        plan.keys.len(),
        dir.display()
    );

    let options = stack::options(&dir, &plugin, REPLICAS, cli.ha, own_networks)
        .binaries(stack::snapshot_binaries(&dir)?)
        .upstream_effects_if(cli.upstream_effects);
    let options = match cli.partitions {
        0 => options,
        partitions => options.partitioned(usize::from(partitions)),
    };
    let mut stack = Stack::start(options).await;
    let endpoints = stack::Endpoints::of(&stack);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("build an HTTP client: {e}"))?;
    println!(
        "stack up after {:.1} s; running the workload and the faults",
        began.elapsed().as_secs_f64()
    );

    let clock = Clock::start();
    let run_start_unix_ms = unix_ms();
    let retry_deadline_ms = duration_ms + u64::try_from(RETRY_TAIL.as_millis()).unwrap_or(0);
    let (faults, attempts) = tokio::join!(
        faults::run(&mut stack, &plan.faults, clock, duration_ms),
        workload::run(&client, &endpoints, &plan.keys, clock, retry_deadline_ms),
    );
    println!(
        "workload done after {:.1} s ({} requests, {} faults); healing and checking replays",
        began.elapsed().as_secs_f64(),
        attempts.len(),
        faults.len()
    );

    stack.wait_healthy().await;
    let executions = verify::executions(&client, &endpoints, 0, run_start_unix_ms).await?;
    let last = executions.iter().map(|e| e.execution).max().unwrap_or(0);
    let verifications = verify::replays(&client, &endpoints, &plan.keys, &attempts).await;
    let verification_executions =
        verify::executions(&client, &endpoints, last, run_start_unix_ms).await?;
    let (effects, ledger) = match cli.upstream_effects {
        true => (
            Some(verify::effects(&client, &endpoints).await?),
            Some(verify::ledger(&client, &endpoints, run_start_unix_ms).await?),
        ),
        false => (None, None),
    };
    let (store_logs, envoy_logs) = stack::logs(&stack);
    drop(stack);
    stack::remove_snapshot(&dir);
    let evidence = Evidence::read(&store_logs, &envoy_logs, run_start_unix_ms);

    let history = History {
        faults,
        attempts,
        executions,
        verifications,
        verification_executions,
        evidence,
        replicated_postgres: cli.ha,
        partitions: usize::from(cli.partitions),
        policy: policy_facts(&plugin),
        lease_ms: Some(LEASE_MS),
        renewal: Some(Renewal {
            interval_ms: settings.renew_interval_ms,
            call_timeout_ms: settings.call_timeout_ms,
            logged: true,
        }),
        ledger,
    };
    let report = checker::check(&history);
    report::write(&dir, &report, &history, &plan)?;
    point_latest(&out, &dir);
    println!();
    print!("{}", report::table(&report));
    println!();
    print!("{}", report::policies(&report, &history));
    println!();
    let replay = replay_command(&cli, seed, duration);
    print!(
        "{}",
        report::summary(&report, &history, &plan, &replay, &dir)
    );
    if let Some(effects) = &effects {
        println!("{effects}");
    }
    println!("run took {:.1} s", began.elapsed().as_secs_f64());
    Ok(!report.failed() && effects.is_none_or(|effects| effects.paid_more_than_once == 0))
}

/// `--recheck`: the checker over a stored `history.json`; prints the table and the verdict.
fn recheck(dir: &Path) -> Result<bool, String> {
    #[derive(serde::Deserialize)]
    struct Stored {
        history: History,
    }
    let path = dir.join("history.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let stored: Stored =
        serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
    let report = checker::check(&stored.history);
    print!("{}", report::table(&report));
    println!();
    print!("{}", report::policies(&report, &stored.history));
    print!("{}", report::verdict(&report));
    Ok(!report.failed())
}

/// Points `out/latest` at `dir` (best effort: the run's path is printed anyway).
fn point_latest(out: &Path, dir: &Path) {
    let latest = out.join("latest");
    let _ = std::fs::remove_file(&latest);
    if let Some(name) = dir.file_name() {
        let _ = std::os::unix::fs::symlink(name, &latest);
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
