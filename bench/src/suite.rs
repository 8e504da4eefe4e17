//! `make bench`: the whole suite, P1–P8 and the reported comparisons, on one stack.
//!
//! Order: start the stack; check the guarded path works and capture a replay's answer (the
//! plain Envoy's `direct_response` serves exactly that); then interleaved rotations —
//! concurrency 1 and 16 of {pgbench, store cycle, guarded first-time POST, unguarded POST}
//! (P1, P4, guarded vs unguarded; P5 CPU per guarded request ÷ unguarded; P6 Postgres CPU
//! per store cycle ÷ pgbench pair), {guarded, unguarded, replay via the store} of a ~480 KB
//! JSON body at 2 (P7 throughput ratio, P8 Envoy CPU per store replay), and {replay,
//! direct_response, direct_response behind the filter} at 16 (P2, and the floor any wasm
//! filter puts under it) — then P3 and the memory readings. The native adapter's Envoy joins
//! the first-time, large-body and replay rotations ([`crate::native`], N1–N3). Rotations share a baseline where the issue says so: P4 is divided by
//! the same pgbench rounds as P1.
//!
//! `--only` runs the rotations the named rows need and nothing else; `--compare-store`
//! adds a second lease-store with other settings to P1/P4's rotation ([`crate::selection`]).
//! Each rotation lives in its own module: [`crate::first_time`] (P1, P4, P5, P6),
//! [`crate::large_body`] (P7, P8), [`crate::replays`] (P2); P3 is [`crate::wake`], P10
//! (another caller under one caller's replay flood) [`crate::flood`]; the physical floor
//! every first-time row is judged against (issue 50) [`crate::floor`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::BenchError;
use crate::first_time::{FilterVariant, Setup, Side};
use crate::load::UniqueSource;
use crate::pgbench::Pgbench;
use crate::procfs::{self, Watched};
use crate::redis::{RedisPair, RedisServer};
use crate::report::{MemoryReport, Report, Row};
use crate::rotation::Schedule;
use crate::selection::{Selection, StoreVariant};
use crate::stack::{BenchStack, ENVOY_WORKERS};
use crate::wake::{self, WakeSetup};
use crate::workload::{RequestTemplate, StoreCycle};
use crate::{flood, floor, large_body, native, replays};
use hyper::StatusCode;

/// How many partitions P9's partitioned database has.
const PARTITIONS: usize = 2;

/// The body every payment request carries.
const PAYMENT_BODY: &str = r#"{"amount":1,"currency":"EUR"}"#;

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
    /// The rows to measure (`--only`; default all).
    pub selection: Selection,
    /// A second lease-store whose cycle and guarded POST join P1/P4's rotation.
    pub compare_store: Option<StoreVariant>,
}

/// Runs the suite and returns the report.
pub async fn run(options: &SuiteOptions) -> Result<Report, BenchError> {
    let run_id = run_id();
    let unique = Arc::new(UniqueSource::new(format!("bench-{run_id}")));
    let mut stack = BenchStack::start(&options.work_dir).await?;

    let payment = |url: &str, key: &str| RequestTemplate::payment(url, key, PAYMENT_BODY);
    let only = &options.selection;
    let mut notes = Vec::new();
    let guarded_first = payment(&stack.guarded.url("/payments"), "{unique}")?;
    let replay = payment(&stack.guarded.url("/payments"), &format!("replay-{run_id}"))?;
    let replay_answer = replays::prime_replay(&replay).await?;
    // The plain Envoy answers unguarded POSTs (P5, P7) and the `direct_response` P2 divides by.
    if only.wants(&["p2", "p5", "p7", "n2", "n3"]) {
        stack
            .start_plain_envoy(StatusCode::CREATED.as_u16(), &replay_answer)
            .await?;
    }
    let variant_envoy = match &options.compare_store {
        Some(variant) => {
            stack.start_variant_store(&variant.env).await?;
            Some(
                stack
                    .start_guarded_on_variant_store("variant-store")
                    .await?,
            )
        }
        None => None,
    };

    // P9: the same cycle and POST through a store on a partitioned database.
    let partitioned_envoy = if only.wants(&["p9"]) {
        let started = async {
            stack.start_partitioned_store(PARTITIONS).await?;
            stack.start_guarded_on_partitioned_store().await
        };
        started
            .await
            .map_err(|e| notes.push(format!("P9 not measured: {e}")))
            .ok()
    } else {
        None
    };

    // Filter settings measured against the default (A/B rows): recording after the reply,
    // and every stream sending its own store calls (`lease_store.coalesce_calls: false`);
    // and the guarded Envoy as `make up` runs it.
    let mut variant_envoys = Vec::new();
    if only.wants(&["p4"]) {
        type Change = fn(&mut serde_json::Value);
        let variants: [(&str, &str, &str, Change); 2] = [
            (
                "after-reply",
                "record: after_reply",
                "before_reply",
                |plugin| {
                    plugin["policies"][0]["record"] = "after_reply".into();
                },
            ),
            (
                "calls-alone",
                "each store call alone",
                "calls coalesced",
                |plugin| {
                    plugin["lease_store"]["coalesce_calls"] = false.into();
                },
            ),
        ];
        for (name, setting, default, change) in variants {
            match stack.start_guarded_variant(name, change).await {
                Ok(envoy) => variant_envoys.push((setting, default, envoy)),
                Err(e) => notes.push(format!("{setting} not measured: {e}")),
            }
        }
        let (setting, default) = ("as make up runs it", "the bench's Envoy (log level warn)");
        match stack.start_guarded_as_shipped("shipped").await {
            Ok(envoy) => variant_envoys.push((setting, default, envoy)),
            Err(e) => notes.push(format!("{setting} not measured: {e}")),
        }
    }

    // The native adapter's Envoy on the stack's store (N1–N3): a missing module is a note.
    let native_envoy = if only.wants(&native::IDS) {
        stack
            .start_native_envoy("native", None)
            .await
            .map_err(|e| notes.push(format!("native adapter not measured: {e}")))
            .ok()
    } else {
        None
    };

    let redis = match (RedisServer::binary(), only.wants(&["p1", "p4"])) {
        (Some(binary), true) => {
            Some(RedisServer::start(&binary, &options.work_dir.join("redis")).await?)
        }
        (None, true) => {
            notes.push(
                "durable Redis baseline skipped: redis-server not found (apt-get install redis-server, or set REDIS_SERVER)".into(),
            );
            None
        }
        _ => None,
    };

    let pgbench = Pgbench::new(
        pg_bin().join("pgbench"),
        stack.postgres_port(),
        options.work_dir.join("pgbench"),
    );
    pgbench.prepare()?;

    let postgres: Vec<Watched> = stack.postgres_watch().into_iter().collect();
    let store = Watched::Process(stack.lease_store_pid());
    let upstream = Watched::Process(stack.upstream_pid());
    let guarded_envoy = Watched::Process(stack.guarded.pid());

    let mut sides = vec![Side {
        label: None,
        cycle: StoreCycle::new(stack.store_authority(), &stack.filter_token())?,
        guarded: (guarded_first, guarded_envoy),
        store,
        postgres: postgres.clone(),
        partitions: 0,
        groups: Vec::new(),
    }];
    if let (Some(variant), Some(envoy), Some((authority, pid))) = (
        &options.compare_store,
        &variant_envoy,
        stack.variant_store(),
    ) {
        sides.push(Side {
            label: Some(variant.label.clone()),
            cycle: StoreCycle::new(authority, &stack.filter_token())?,
            guarded: (
                payment(&envoy.url("/payments"), "{unique}")?,
                Watched::Process(envoy.pid()),
            ),
            store: Watched::Process(pid),
            postgres: postgres.clone(),
            partitions: 0,
            groups: Vec::new(),
        });
    }
    if let (Some(envoy), Some((authority, pid, router, partitions))) =
        (&partitioned_envoy, stack.partitioned_store())
    {
        sides.push(Side {
            label: Some(format!("{PARTITIONS} partitions")),
            cycle: StoreCycle::new(authority, &stack.filter_token())?,
            guarded: (
                payment(&envoy.url("/payments"), "{unique}")?,
                Watched::Process(envoy.pid()),
            ),
            store: Watched::Process(pid),
            postgres: router.iter().chain(&partitions).copied().collect(),
            partitions: PARTITIONS,
            groups: vec![("router", router), ("partitions", partitions)],
        });
    }
    let floor_pgbench = pgbench.clone();
    let first_time = Setup {
        selection: only.clone(),
        pgbench,
        postgres: postgres.clone(),
        upstream,
        unguarded: match &stack.plain {
            Some(plain) => Some((
                payment(&plain.url("/payments"), "{unique}")?,
                Watched::Process(plain.pid()),
            )),
            None => None,
        },
        sides,
        redis: redis.as_ref().map(|server| {
            (
                RedisPair::new(server.authority()),
                Watched::Process(server.pid()),
            )
        }),
        filter_variants: variant_envoys
            .iter()
            .map(|(setting, default, envoy)| {
                Ok(FilterVariant {
                    setting,
                    default,
                    guarded: (
                        payment(&envoy.url("/payments"), "{unique}")?,
                        Watched::Process(envoy.pid()),
                    ),
                })
            })
            .collect::<Result<_, BenchError>>()?,
        native: match &native_envoy {
            Some(envoy) => Some((
                payment(&envoy.url("/payments"), "{unique}")?,
                Watched::Process(envoy.pid()),
            )),
            None => None,
        },
    };

    let mut rows = Vec::new();
    if first_time.wanted() {
        for &c in &options.concurrencies {
            rows.extend(first_time.rows(c, options.schedule, &unique).await?);
        }
    }
    if only.wants(&["p7", "p8", "n3"]) {
        let charged = large_body::Charged {
            store,
            upstream,
            postgres: &postgres,
        };
        let plain = stack.plain()?;
        rows.extend(
            large_body::rows(
                &stack,
                plain,
                native_envoy.as_ref().filter(|_| only.wants(&["n3"])),
                charged,
                &run_id,
                options.schedule,
                &unique,
            )
            .await?,
        );
    }

    if only.wants(&["p2", "n2"]) {
        let plain = stack.plain()?;
        rows.extend(
            replays::rows(
                &stack,
                plain,
                native_envoy.as_ref().filter(|_| only.wants(&["n2"])),
                &replay_answer,
                &payment,
                (store, &postgres),
                &run_id,
                (options.replay_concurrency, options.schedule),
                &unique,
                &mut notes,
            )
            .await?,
        );
    }

    if only.wants(&["p3"]) {
        let wake = wake::run(
            &WakeSetup {
                request: payment(&stack.guarded.url("/payments"), "wake-{unique}")?,
                upstream: stack.upstream_authority(),
                store: stack.store_authority(),
                envoy_admin: stack.guarded_admin_authority(),
                followers: options.followers,
                rounds: options.wake_rounds,
            },
            &run_id,
        )
        .await?;
        rows.push(wake::row(
            &format!(
                "follower wake, {} followers: gate open → follower answer",
                options.followers
            ),
            &wake.from_gate,
            wake.failures,
            wake.first_failure.clone(),
            Some(crate::targets::p3()),
        ));
        rows.push(wake::row(
            "follower wake: winner's answer → follower answer",
            &wake.from_winner,
            0,
            None,
            None,
        ));
        rows.push(wake::row(
            "winner: gate open → its answer (incl. finalize commit)",
            &wake.winner,
            0,
            None,
            None,
        ));
    }

    if only.wants(&["p10"]) {
        rows.extend(
            flood::rows(
                &stack.store_authority(),
                &stack.filter_token(),
                stack.lease_store_pid(),
                options.schedule,
                &unique,
            )
            .await?,
        );
    }

    let floor = if only.wants(&["floor"]) {
        let (mut floor, floor_rows) = measure_floor(
            &stack,
            floor::Setup {
                pgbench: floor_pgbench,
                postgres: postgres.clone(),
                edge: None,
                data_dir: Some(stack.postgres_data_dir()),
            },
            (upstream, options),
            &unique,
            &mut notes,
        )
        .await?;
        rows.extend(floor_rows);
        floor.judge(&rows);
        Some(floor)
    } else {
        None
    };

    drop(native_envoy);
    drop(variant_envoy);
    drop(variant_envoys);
    let memory = MemoryReport {
        lease_store: procfs::memory(stack.lease_store_pid()),
        envoy_with_filter: procfs::memory(stack.guarded.pid()),
        envoy_without_filter: stack
            .plain
            .as_ref()
            .and_then(|plain| procfs::memory(plain.pid())),
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
        floor,
        machine: crate::report::Machine::describe(options.machine_note.clone()),
        notes,
    })
}

/// The physical floor (issue 50): the journal floor on the stack's Postgres, the edge floor
/// through a guarded Envoy in front of the stub store, the latency floor from the data
/// directory; `setup.edge` is filled here. The stub and its Envoy stop when it returns.
async fn measure_floor(
    stack: &BenchStack,
    mut setup: floor::Setup,
    (upstream, options): (Watched, &SuiteOptions),
    unique: &Arc<UniqueSource>,
    notes: &mut Vec<String>,
) -> Result<(floor::Floor, Vec<Row>), BenchError> {
    let (stub, stub_port) = floor::stub::start().await?;
    let envoy = match stack.start_guarded_on_port("edge-floor", stub_port).await {
        Ok(envoy) => Some(envoy),
        Err(e) => {
            notes.push(format!("edge floor not measured: {e}"));
            None
        }
    };
    if let Some(envoy) = &envoy {
        setup.edge = Some((
            RequestTemplate::payment(&envoy.url("/payments"), "{unique}", PAYMENT_BODY)?,
            vec![
                Watched::Process(envoy.pid()),
                Watched::Process(stub.pid()),
                upstream,
            ],
        ));
    }
    setup
        .measure(&options.concurrencies, options.schedule, unique, notes)
        .await
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
