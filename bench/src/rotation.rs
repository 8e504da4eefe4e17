//! Interleaved measurement: every scenario runs in the same rotation as its baseline.
//!
//! On a shared machine throughput drifts by more than the differences being measured (a
//! build starts on the other core, the page cache fills, Postgres checkpoints). Measuring A
//! for a minute and then B for a minute would put the drift into the ratio. Instead each
//! contender gets one short warm-up, then rounds run A, B, C, A, B, C, …, and each contender's
//! rounds are summed: drift lands on all of them alike.
//!
//! A contender is either a load [`Workload`] driven by [`crate::load`] or a `pgbench` run of
//! the store's own SQL ([`crate::pgbench`]). For each round the CPU time of the processes the
//! contender runs through is read before and after ([`crate::procfs`]).

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::error::BenchError;
use crate::load::{self, Bounds, UniqueSource};
use crate::pgbench::Pgbench;
use crate::procfs::{Procfs, Watched};
use crate::stats::{self, Percentiles};
use crate::workload::Workload;

/// What a contender runs.
#[derive(Debug, Clone)]
pub enum Drive {
    /// A load workload through the closed-loop driver.
    Load(Arc<Workload>),
    /// pgbench running the store's claim + finalize SQL.
    Pgbench(Pgbench),
}

/// One side of a comparison.
#[derive(Debug, Clone)]
pub struct Contender {
    /// Its name in the table.
    pub name: String,
    /// What it runs.
    pub drive: Drive,
    /// Requests (or pgbench clients) in flight.
    pub concurrency: usize,
    /// The processes whose CPU time it is charged.
    pub watched: Vec<Watched>,
    /// Named subsets of `watched` whose CPU is also reported apart (e.g. Postgres).
    pub groups: Vec<(&'static str, Vec<Watched>)>,
}

impl Contender {
    /// Also reports the CPU of these named subsets of its processes apart.
    pub fn grouped(mut self, groups: Vec<(&'static str, Vec<Watched>)>) -> Contender {
        self.groups = groups;
        self
    }
}

/// A contender named `{name} c={concurrency}`, charged the CPU of `watched`.
pub fn contender(name: &str, drive: Drive, concurrency: usize, watched: Vec<Watched>) -> Contender {
    Contender {
        name: format!("{name} c={concurrency}"),
        drive,
        concurrency,
        watched,
        groups: Vec::new(),
    }
}

/// A [`contender`] driving `workload` through the closed-loop driver.
pub fn load(
    name: &str,
    workload: Workload,
    concurrency: usize,
    watched: Vec<Watched>,
) -> Contender {
    contender(name, Drive::Load(Arc::new(workload)), concurrency, watched)
}

/// How long rounds last and how many there are.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Measured rounds per contender.
    pub rounds: usize,
    /// Length of one round (whole seconds for pgbench).
    pub round: Duration,
    /// Length of the warm-up round.
    pub warmup: Duration,
    /// Requests after which a round ends early.
    pub max_requests: u64,
}

/// What a contender measured over all its rounds.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// The contender's name.
    pub name: String,
    /// Its concurrency.
    pub concurrency: usize,
    /// Successful operations.
    pub ok: u64,
    /// Failed operations.
    pub errors: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
    /// Summed round time.
    pub elapsed: Duration,
    /// Latencies, microseconds, corrected for coordinated omission.
    pub histogram: Histogram<u64>,
    /// CPU seconds of the watched processes over the measured rounds.
    pub cpu_seconds: Option<f64>,
    /// CPU seconds of each of the contender's named groups.
    pub group_cpu_seconds: Vec<(&'static str, f64)>,
}

impl Measurement {
    /// Operations per second.
    pub fn rps(&self) -> f64 {
        stats::rate(self.ok, self.elapsed)
    }

    /// Its latency percentiles.
    pub fn percentiles(&self) -> Option<Percentiles> {
        Percentiles::of(&self.histogram)
    }

    /// CPU microseconds per successful operation.
    pub fn cpu_us_per_op(&self) -> Option<f64> {
        self.per_op(self.cpu_seconds?)
    }

    /// CPU microseconds per successful operation of the named group.
    pub fn group_cpu_us_per_op(&self, group: &str) -> Option<f64> {
        let (_, cpu) = self.group_cpu_seconds.iter().find(|(g, _)| *g == group)?;
        self.per_op(*cpu)
    }

    fn per_op(&self, cpu_seconds: f64) -> Option<f64> {
        (self.ok > 0).then(|| cpu_seconds * 1e6 / self.ok as f64)
    }
}

/// One round's raw figures.
struct Round {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    histogram: Histogram<u64>,
}

/// Runs the contenders interleaved and returns one measurement each, in order.
pub async fn rotate(
    contenders: &[Contender],
    schedule: Schedule,
    unique: &Arc<UniqueSource>,
) -> Result<Vec<Measurement>, BenchError> {
    let procfs = Procfs::new();
    let mut intervals = Vec::with_capacity(contenders.len());
    for contender in contenders {
        let warm = run_round(contender, schedule.warmup, schedule, None, unique).await?;
        // The calibrated interval for the correction: the median of the warm-up.
        let median =
            Percentiles::of(&warm.histogram).map(|p| Duration::from_secs_f64(p.p50_ms / 1000.0));
        intervals.push(median);
    }
    let mut measurements: Vec<Measurement> = contenders
        .iter()
        .map(|c| Measurement {
            name: c.name.clone(),
            concurrency: c.concurrency,
            ok: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            histogram: stats::histogram(),
            cpu_seconds: (!c.watched.is_empty()).then_some(0.0),
            group_cpu_seconds: c.groups.iter().map(|(name, _)| (*name, 0.0)).collect(),
        })
        .collect();
    for _ in 0..schedule.rounds {
        for ((contender, measurement), interval) in
            contenders.iter().zip(&mut measurements).zip(&intervals)
        {
            let cpu_before = procfs.cpu_seconds(&contender.watched);
            let groups_before: Vec<f64> = contender
                .groups
                .iter()
                .map(|(_, watched)| procfs.cpu_seconds(watched))
                .collect();
            let round = run_round(contender, schedule.round, schedule, *interval, unique).await?;
            let cpu = procfs.cpu_seconds(&contender.watched) - cpu_before;
            for ((group, total), before) in contender
                .groups
                .iter()
                .zip(&mut measurement.group_cpu_seconds)
                .zip(groups_before)
            {
                total.1 += procfs.cpu_seconds(&group.1) - before;
            }
            measurement.ok += round.ok;
            measurement.errors += round.errors;
            if measurement.first_error.is_none() {
                measurement.first_error = round.first_error;
            }
            measurement.elapsed += round.elapsed;
            let _ = measurement.histogram.add(round.histogram);
            if let Some(total) = measurement.cpu_seconds.as_mut() {
                *total += cpu;
            }
        }
    }
    Ok(measurements)
}

async fn run_round(
    contender: &Contender,
    duration: Duration,
    schedule: Schedule,
    expected_interval: Option<Duration>,
    unique: &Arc<UniqueSource>,
) -> Result<Round, BenchError> {
    match &contender.drive {
        Drive::Load(workload) => {
            let bounds = Bounds {
                duration,
                max_requests: schedule.max_requests,
            };
            let result = load::run(
                Arc::clone(workload),
                Arc::clone(unique),
                contender.concurrency,
                bounds,
                expected_interval,
            )
            .await?;
            Ok(Round {
                ok: result.ok,
                errors: result.errors,
                first_error: result.first_error,
                elapsed: result.elapsed,
                histogram: result.histogram,
            })
        }
        Drive::Pgbench(pgbench) => {
            let pgbench = pgbench.clone();
            let clients = contender.concurrency;
            let seconds = duration.as_secs().max(1);
            let run = tokio::task::spawn_blocking(move || {
                pgbench.run(clients, seconds, expected_interval)
            })
            .await
            .map_err(|e| BenchError::Pgbench(format!("the pgbench task failed: {e}")))??;
            Ok(Round {
                ok: run.transactions,
                errors: run.failures,
                first_error: (run.failures > 0).then(|| format!("{} failed", run.failures)),
                elapsed: run.elapsed,
                histogram: run.histogram,
            })
        }
    }
}
