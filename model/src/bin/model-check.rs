//! `make model-check` / `make model`: explores the protocol model and prints states
//! explored, depth reached and every property's verdict; a violation prints its
//! counterexample trace and fails (`docs/model.md#running-it`).
//!
//! `model-check [--deep] [--threads N] [--mutation NAME] [--after-reply] [--reconcile]
//! [--unflagged-proxy]`

use std::process::ExitCode;
use std::time::Instant;

use keyflight_model::check::{check, trace};
use keyflight_model::{Mutation, PROPERTIES, Params};

fn mutation(name: &str) -> Option<Mutation> {
    Some(match name {
        "takeover-ignores-grace" => Mutation::TakeoverIgnoresGrace,
        "grace-only-while-failing" => Mutation::GraceOnlyWhileFailing,
        "cleanup-deletes-live-pending" => Mutation::CleanupDeletesLivePending,
        "finalize-unfenced" => Mutation::FinalizeUnfenced,
        "steal-ignores-fingerprint" => Mutation::StealIgnoresFingerprint,
        "outbox-drops-on-transient-error" => Mutation::OutboxDropsOnTransientError,
        "renew-timeout-past-slack" => Mutation::RenewTimeoutPastSlack,
        "steal-ignores-hold" => Mutation::StealIgnoresHold,
        "hold-ignores-the-retrys-flag" => Mutation::HoldIgnoresTheRetrysFlag,
        "floor-admits-its-fence" => Mutation::FloorAdmitsItsFence,
        "absent-without-floor" => Mutation::AbsentWithoutFloor,
        _ => return None,
    })
}

fn main() -> ExitCode {
    let mut params = Params::bounded();
    let mut threads = 2;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--deep" => {
                params = Params {
                    mutation: params.mutation,
                    ..Params::deep()
                }
            }
            "--horizon" => {
                params.horizon_ticks = args.next().and_then(|n| n.parse().ok()).unwrap_or(12)
            }
            "--proxies" => params.proxies = args.next().and_then(|n| n.parse().ok()).unwrap_or(2),
            "--conflicting-client" => params
                .clients
                .push(keyflight_model::ClientSpec { op: 1, attempts: 1 }),
            "--after-reply" => params.filter.after_reply = true,
            "--reconcile" => params.filter.uncertain = keyflight_model::Uncertain::Reconcile,
            "--unflagged-proxy" => params.unflagged_proxy = Some(0),
            "--faults" => params.faults = args.next().and_then(|n| n.parse().ok()).unwrap_or(1),
            "--threads" => threads = args.next().and_then(|n| n.parse().ok()).unwrap_or(2),
            "--mutation" => match args.next().as_deref().and_then(mutation) {
                Some(m) => params = params.mutated(m),
                None => {
                    eprintln!("unknown mutation");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!(
                    "usage: model-check [--deep] [--threads N] [--mutation NAME] (got {other})"
                );
                return ExitCode::from(2);
            }
        }
    }
    let started = Instant::now();
    let report = check(params.clone(), threads, params.mutation.is_some());
    println!(
        "states explored: {} ({} distinct), depth reached: {}, in {:.1} s",
        report.states,
        report.unique,
        report.depth,
        started.elapsed().as_secs_f64()
    );
    println!(
        "bounds: {} proxies, {} replicas, {} clients, {} ticks of {} ms, {} fault(s) per history{}",
        params.proxies,
        params.replicas,
        params.clients.len(),
        params.horizon_ticks,
        keyflight_model::TICK_MS,
        params.faults,
        params
            .mutation
            .map(|m| format!(", mutation {m:?}"))
            .unwrap_or_default()
    );
    println!("properties checked:");
    for (name, _) in PROPERTIES {
        let verdict = if report.violations.iter().any(|(n, _)| *n == name) {
            "VIOLATED"
        } else {
            "holds"
        };
        println!("  {verdict:>8}  {name}");
    }
    for name in &report.unreached {
        println!("  UNREACHED  sometimes: {name}");
    }
    for (name, path) in &report.violations {
        println!("counterexample for \"{name}\":");
        print!("{}", trace(&params, name, path));
    }
    if params.mutation.is_some() {
        // A mutation must be caught.
        return if report.violations.is_empty() {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    if report.violations.is_empty() && report.unreached.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
