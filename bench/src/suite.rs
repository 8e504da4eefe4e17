//! `make bench`: the whole suite, P1–P8 and the reported comparisons, on one stack.
//!
//! Order: start the stack; check the guarded path works and capture a replay's answer (the
//! plain Envoy's `direct_response` serves exactly that); then interleaved rotations —
//! concurrency 1 and 16 of {pgbench, store cycle, guarded first-time POST, unguarded POST}
//! (P1, P4, guarded vs unguarded; P5 CPU per guarded request ÷ unguarded; P6 Postgres CPU
//! per store cycle ÷ pgbench pair), {guarded, unguarded, replay via the store} of a ~480 KB
//! JSON body at 2 (P7 throughput ratio, P8 Envoy CPU per store replay), and {replay,
//! direct_response, direct_response behind the filter} at 16 (P2, and the floor any wasm
//! filter puts under it) — then P3 and the memory readings. Rotations share a baseline where the issue says so: P4 is divided by
//! the same pgbench rounds as P1.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::StatusCode;

use crate::error::BenchError;
use crate::http::Connection;
use crate::load::UniqueSource;
use crate::pgbench::Pgbench;
use crate::procfs::{self, Watched};
use crate::report::{MemoryReport, Report, Row};
use crate::rotation::{self, Contender, Drive, Schedule};
use crate::stack::{BenchStack, ENVOY_WORKERS};
use crate::stats::{Percentiles, Target};
use crate::wake::{self, WakeSetup};
use crate::workload::{RequestTemplate, StoreCycle, Workload};

/// The body every payment request carries.
const PAYMENT_BODY: &str = r#"{"amount":1,"currency":"EUR"}"#;

/// Concurrency of the large-body comparison (the issue measured it at two connections).
const LARGE_CONCURRENCY: usize = 2;

/// A payment of about 480 KB: an order of 3,600 line items with numbers, strings and
/// nested objects, so the fingerprint's canonical JSON does real work. The demo upstream
/// echoes it, so the recorded answer is about as large.
fn large_payment_body() -> String {
    let items: Vec<String> = (0..3600)
        .map(|i| {
            format!(
                r#"{{"sku":"SKU-{i:06}","qty":{},"unit_price":{}.{:02},"note":"line item {i} of a large order","tags":["a","b","c"],"dims":{{"w":{},"h":{}}}}}"#,
                i % 7 + 1,
                i % 500,
                i % 100,
                i % 30,
                i % 40
            )
        })
        .collect();
    format!(
        r#"{{"amount":1,"currency":"EUR","items":[{}]}}"#,
        items.join(",")
    )
}

/// What the suite is told on the command line.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Round lengths and counts.
    pub schedule: Schedule,
    /// The two concurrencies of P1/P4.
    pub concurrencies: Vec<usize>,
    /// Concurrency of the replay comparison (P2).
    pub replay_concurrency: usize,
    /// P3 followers per round.
    pub followers: usize,
    /// P3 rounds.
    pub wake_rounds: usize,
    /// Where Envoy configs and pgbench files go.
    pub work_dir: PathBuf,
    /// Anything to record about the machine (e.g. "shared with two builds").
    pub machine_note: Option<String>,
}

/// Runs the suite and returns the report.
pub async fn run(options: &SuiteOptions) -> Result<Report, BenchError> {
    let run_id = run_id();
    let unique = Arc::new(UniqueSource::new(format!("bench-{run_id}")));
    let mut stack = BenchStack::start(&options.work_dir).await?;

    let payment = |url: &str, key: &str| {
        RequestTemplate::parse(
            url,
            "POST",
            &[
                "x-user: alice".to_owned(),
                "content-type: application/json".to_owned(),
                format!("idempotency-key: {key}"),
            ],
            PAYMENT_BODY,
            201,
        )
    };
    let guarded_first = payment(&stack.guarded.url("/payments"), "{unique}")?;
    let replay = payment(&stack.guarded.url("/payments"), &format!("replay-{run_id}"))?;
    let replay_answer = prime_replay(&replay).await?;
    stack
        .start_plain_envoy(StatusCode::CREATED.as_u16(), &replay_answer)
        .await?;
    let plain = stack.plain()?;
    let unguarded = payment(&plain.url("/payments"), "{unique}")?;
    let direct = payment(
        &plain.url(crate::envoy::DIRECT_PATH),
        &format!("replay-{run_id}"),
    )?;
    let floor_envoy = stack
        .start_filter_floor_envoy(StatusCode::CREATED.as_u16(), &replay_answer)
        .await?;
    let floor = payment(
        &floor_envoy.url(crate::envoy::DIRECT_PATH),
        &format!("replay-{run_id}"),
    )?;

    let pgbench = Pgbench {
        binary: pg_bin().join("pgbench"),
        port: stack.postgres_port(),
        work_dir: options.work_dir.join("pgbench"),
    };
    pgbench.prepare()?;
    let cycle = StoreCycle::new(stack.store_authority(), &stack.filter_token())?;

    let postgres: Vec<Watched> = stack.postgres_watch().into_iter().collect();
    let store = Watched::Process(stack.lease_store_pid());
    let upstream = Watched::Process(stack.upstream_pid());
    let guarded_envoy = Watched::Process(stack.guarded.pid());
    let plain_envoy = Watched::Process(plain.pid());
    let with =
        |extra: &[Watched]| -> Vec<Watched> { extra.iter().chain(&postgres).copied().collect() };
    let postgres_group = || vec![("postgres", postgres.clone())];

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &c in &options.concurrencies {
        let contenders = [
            contender("pgbench", Drive::Pgbench(pgbench.clone()), c, with(&[]))
                .grouped(postgres_group()),
            load(
                "store cycle",
                Workload::StoreCycle(cycle.clone()),
                c,
                with(&[store]),
            )
            .grouped(postgres_group()),
            load(
                "guarded POST",
                Workload::Request(guarded_first.clone()),
                c,
                with(&[guarded_envoy, store, upstream]),
            )
            .grouped(postgres_group()),
            load(
                "unguarded POST",
                Workload::Request(unguarded.clone()),
                c,
                vec![plain_envoy, upstream],
            ),
        ];
        let m = rotation::rotate(&contenders, options.schedule, &unique).await?;
        let [pg, cycle_m, guarded_m, unguarded_m] = &m[..] else {
            return Err(BenchError::Answer("a rotation lost a contender".into()));
        };
        let p1 = Target::RatioAtLeast { min: 0.90 };
        let p4 = Target::RatioAtLeast { min: 0.80 };
        rows.push(Row::measured(
            "base",
            "pgbench: the store's claim+finalize SQL",
            pg,
            None,
            None,
        ));
        rows.push(Row::measured(
            "P1",
            "lease-store claim+finalize over HTTP",
            cycle_m,
            Some(pg),
            Some(p1),
        ));
        rows.push(Row::measured(
            "P4",
            "guarded first-time POST, unique keys",
            guarded_m,
            Some(pg),
            Some(p4),
        ));
        rows.push(Row::measured(
            "base",
            "unguarded POST (Envoy without the filter)",
            unguarded_m,
            None,
            None,
        ));
        rows.push(Row::measured(
            "—",
            "guarded vs unguarded POST",
            guarded_m,
            Some(unguarded_m),
            None,
        ));
        rows.push(Row::cpu_compared(
            "P5",
            "CPU per guarded first-time POST (all processes) ÷ unguarded POST's",
            guarded_m,
            guarded_m.cpu_us_per_op(),
            (unguarded_m, unguarded_m.cpu_us_per_op()),
            Some(Target::RatioAtMost { max: 3.0 }),
        ));
        rows.push(Row::cpu_compared(
            "P6",
            "Postgres CPU per claim+finalize: store cycle ÷ pgbench",
            cycle_m,
            cycle_m.group_cpu_us_per_op("postgres"),
            (pg, pg.group_cpu_us_per_op("postgres")),
            Some(Target::RatioAtMost { max: 1.1 }),
        ));
        rows.push(Row::cpu_compared(
            "—",
            "Postgres CPU per guarded first-time POST ÷ pgbench pair",
            guarded_m,
            guarded_m.group_cpu_us_per_op("postgres"),
            (pg, pg.group_cpu_us_per_op("postgres")),
            None,
        ));
    }

    // Large bodies: a ~480 KB JSON payment whose echoed answer is recorded (too large for
    // the edge cache, so its replays come from the store).
    let large_body = large_payment_body();
    let large = |url: &str, key: &str| {
        RequestTemplate::parse(
            url,
            "POST",
            &[
                "x-user: alice".to_owned(),
                "content-type: application/json".to_owned(),
                format!("idempotency-key: {key}"),
            ],
            &large_body,
            201,
        )
    };
    let large_guarded = large(&stack.guarded.url("/payments"), "{unique}")?;
    let large_unguarded = large(&plain.url("/payments"), "{unique}")?;
    let large_replay = large(&stack.guarded.url("/payments"), &format!("large-{run_id}"))?;
    prime_replay(&large_replay).await?;
    let envoy_group = vec![("envoy", vec![guarded_envoy])];
    let contenders = [
        load(
            "large guarded POST",
            Workload::Request(large_guarded),
            LARGE_CONCURRENCY,
            with(&[guarded_envoy, store, upstream]),
        )
        .grouped(envoy_group.clone()),
        load(
            "large unguarded POST",
            Workload::Request(large_unguarded),
            LARGE_CONCURRENCY,
            vec![plain_envoy, upstream],
        )
        .grouped(vec![("envoy", vec![plain_envoy])]),
        load(
            "large replay via store",
            Workload::Request(large_replay),
            LARGE_CONCURRENCY,
            with(&[guarded_envoy, store]),
        )
        .grouped(envoy_group),
    ];
    let m = rotation::rotate(&contenders, options.schedule, &unique).await?;
    let [large_guarded_m, large_unguarded_m, large_replay_m] = &m[..] else {
        return Err(BenchError::Answer("a rotation lost a contender".into()));
    };
    rows.push(Row::measured(
        "base",
        &format!(
            "unguarded POST, {} KB JSON body echoed",
            large_body.len() / 1000
        ),
        large_unguarded_m,
        None,
        None,
    ));
    rows.push(Row::measured(
        "P7",
        "guarded first-time POST, same large body, answer recorded",
        large_guarded_m,
        Some(large_unguarded_m),
        Some(Target::RatioAtLeast { min: 0.5 }),
    ));
    rows.push(Row::cpu_compared(
        "—",
        "Envoy CPU per large guarded POST ÷ unguarded",
        large_guarded_m,
        large_guarded_m.group_cpu_us_per_op("envoy"),
        (
            large_unguarded_m,
            large_unguarded_m.group_cpu_us_per_op("envoy"),
        ),
        None,
    ));
    rows.push(Row::cpu_of(
        "P8",
        "replay of that large record via the store: Envoy CPU per replay",
        large_replay_m,
        large_replay_m.group_cpu_us_per_op("envoy"),
        Some(Target::CpuAtMostUs { max: 3300.0 }),
    ));

    // Replay via the store: a second guarded Envoy with the policy's edge cache off.
    let no_cache = match stack
        .start_guarded_variant("no-edge-cache", |plugin| {
            plugin["policies"][0]["edge_cache"] = serde_json::Value::Bool(false);
        })
        .await
    {
        Ok(envoy) => {
            let via_store = payment(&envoy.url("/payments"), &format!("replay-{run_id}"))?;
            prime_replay(&via_store).await?;
            Some((envoy, via_store))
        }
        Err(e) => {
            notes.push(format!(
                "replay via the store (edge cache off) not measured: {e}"
            ));
            None
        }
    };

    let hits_before = edge_cache_hits(&stack).await?;
    let c = options.replay_concurrency;
    let mut contenders = vec![
        load(
            "replay",
            Workload::Request(replay.clone()),
            c,
            with(&[guarded_envoy, store]),
        ),
        load(
            "direct_response",
            Workload::Request(direct),
            c,
            vec![plain_envoy],
        ),
        load(
            "direct_response behind the filter",
            Workload::Request(floor),
            c,
            vec![Watched::Process(floor_envoy.pid())],
        ),
    ];
    if let Some((envoy, via_store)) = &no_cache {
        contenders.push(load(
            "replay via store",
            Workload::Request(via_store.clone()),
            c,
            with(&[Watched::Process(envoy.pid()), store]),
        ));
    }
    let m = rotation::rotate(&contenders, options.schedule, &unique).await?;
    let (replay_m, direct_m, floor_m) = match &m[..] {
        [replay_m, direct_m, floor_m, ..] => (replay_m, direct_m, floor_m),
        _ => return Err(BenchError::Answer("a rotation lost a contender".into())),
    };
    let hits = edge_cache_hits(&stack).await?.saturating_sub(hits_before);
    let p2 = Some(Target::RatioAtLeast { min: 0.90 });
    rows.push(Row::measured(
        "base",
        "Envoy direct_response, same request",
        direct_m,
        None,
        None,
    ));
    rows.push(Row::measured(
        "—",
        "direct_response with the filter loaded, no policy (wasm floor)",
        floor_m,
        Some(direct_m),
        None,
    ));
    if hits * 2 > replay_m.ok {
        rows.push(Row::measured(
            "P2",
            "replay served from the edge cache",
            replay_m,
            Some(direct_m),
            p2,
        ));
        if let Some(via_store_m) = m.get(3) {
            rows.push(Row::measured(
                "—",
                "replay via the store (edge cache off)",
                via_store_m,
                Some(direct_m),
                None,
            ));
        }
    } else {
        rows.push(Row::measured(
            "P2",
            "replay via the store (no edge-cache hits: F9 not in this build)",
            replay_m,
            Some(direct_m),
            p2,
        ));
        notes.push(format!(
            "P2 measured replay via the store: {hits} of {} replays were edge-cache hits",
            replay_m.ok
        ));
    }

    let wake = wake::run(
        &WakeSetup {
            request: payment(&stack.guarded.url("/payments"), "wake-{unique}")?,
            upstream: stack.upstream_authority(),
            store: stack.store_authority(),
            followers: options.followers,
            rounds: options.wake_rounds,
        },
        &run_id,
    )
    .await?;
    rows.push(wake_row(
        &format!(
            "follower wake, {} followers: gate open → follower answer",
            options.followers
        ),
        &wake.from_gate,
        wake.failures,
        wake.first_failure.clone(),
        Some(Target::P50AtMostMs { max: 5.0 }),
    ));
    rows.push(wake_row(
        "follower wake: winner's answer → follower answer",
        &wake.from_winner,
        0,
        None,
        None,
    ));
    rows.push(wake_row(
        "winner: gate open → its answer (incl. finalize commit)",
        &wake.winner,
        0,
        None,
        None,
    ));

    drop(no_cache);
    drop(floor_envoy);
    let memory = MemoryReport {
        lease_store: procfs::memory(stack.lease_store_pid()),
        envoy_with_filter: procfs::memory(stack.guarded.pid()),
        envoy_without_filter: procfs::memory(plain.pid()),
        wasm_bytes: std::fs::metadata(stack.wasm_path()).map_or(0, |m| m.len()),
    };
    notes.extend([
        format!(
            "closed loop, one connection per worker; latencies corrected for coordinated omission \
             against each scenario's warm-up median; {} rounds of {:?} per contender, interleaved",
            options.schedule.rounds, options.schedule.round
        ),
        format!("Envoy --concurrency {ENVOY_WORKERS} on both sides; Postgres durable (fsync, synchronous_commit on)"),
        "CPU µs/op: utime+stime of the processes under test (not the load generator) per operation".into(),
    ]);
    Ok(Report {
        rows,
        memory,
        machine: crate::report::Machine::describe(options.machine_note.clone()),
        notes,
    })
}

fn contender(name: &str, drive: Drive, concurrency: usize, watched: Vec<Watched>) -> Contender {
    Contender {
        name: format!("{name} c={concurrency}"),
        drive,
        concurrency,
        watched,
        groups: Vec::new(),
    }
}

fn load(name: &str, workload: Workload, concurrency: usize, watched: Vec<Watched>) -> Contender {
    contender(name, Drive::Load(Arc::new(workload)), concurrency, watched)
}

fn wake_row(
    scenario: &str,
    histogram: &hdrhistogram::Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
    target: Option<Target>,
) -> Row {
    let latency = Percentiles::of(histogram);
    Row {
        id: if target.is_some() { "P3" } else { "—" }.to_owned(),
        scenario: scenario.to_owned(),
        concurrency: None,
        rps: None,
        latency,
        errors,
        first_error,
        baseline: None,
        ratio: None,
        target,
        met: target.and_then(|t| t.met(None, latency.map(|l| l.p50_ms))),
        cpu_us_per_op: None,
    }
}

/// Sends the replay request twice (record, then replay) and returns the replayed body.
async fn prime_replay(replay: &RequestTemplate) -> Result<String, BenchError> {
    let mut connection = Connection::open(&replay.target.authority).await?;
    let mut body = String::new();
    for attempt in ["first", "replay"] {
        let answer = replay.send_for_answer(&mut connection, "").await?;
        if answer.status != StatusCode::CREATED {
            return Err(BenchError::Answer(format!(
                "the guarded path's {attempt} answer was {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            )));
        }
        body = String::from_utf8_lossy(&answer.body).into_owned();
    }
    Ok(body)
}

/// `outcome.replay_edge_cache` of the guarded Envoy (0 when the filter has no such counter).
async fn edge_cache_hits(stack: &BenchStack) -> Result<u64, BenchError> {
    let stat = "wasmcustom.keyflight.outcome.replay_edge_cache";
    let url = stack.guarded_stats_url(stat);
    let target = crate::http::Target::parse(&url)?;
    let mut connection = Connection::open(&target.authority).await?;
    let answer = connection
        .send(hyper::Method::GET, &target.path, &[], bytes::Bytes::new())
        .await?;
    Ok(String::from_utf8_lossy(&answer.body)
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{stat}: ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0))
}

/// Where the Postgres binaries are (`PG_BIN`, as the Makefile and testkit use).
fn pg_bin() -> PathBuf {
    std::env::var_os("PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

/// Unique enough to keep keys and gates of two runs apart.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}
