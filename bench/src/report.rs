//! The results: one table on stdout, the same rows as JSON under `target/bench/`.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::error::BenchError;
use crate::floor::Floor;
use crate::procfs::Memory;
use crate::rotation::Measurement;
use crate::stats::{self, Percentiles, Target};

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The id (`P1`…`P4`), `-` for reported-only rows, `base` for baselines.
    pub id: String,
    /// What was measured.
    pub scenario: String,
    /// Requests (or pgbench clients) in flight.
    pub concurrency: Option<usize>,
    /// Operations per second.
    pub rps: Option<f64>,
    /// Latency percentiles.
    pub latency: Option<Percentiles>,
    /// Failed operations.
    pub errors: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
    /// The row this one is divided by.
    pub baseline: Option<String>,
    /// `rps / baseline rps`.
    pub ratio: Option<f64>,
    /// The target.
    pub target: Option<Target>,
    /// Whether the target is met.
    pub met: Option<bool>,
    /// CPU microseconds of the processes under test per operation.
    pub cpu_us_per_op: Option<f64>,
}

impl Row {
    /// A row comparing CPU per operation (`cpu`, of the processes named in the scenario)
    /// with a baseline's (`baseline_cpu`): the ratio is CPU ÷ CPU, not rps ÷ rps.
    pub fn cpu_compared(
        id: &str,
        scenario: &str,
        m: &Measurement,
        cpu: Option<f64>,
        baseline: (&Measurement, Option<f64>),
        target: Option<Target>,
    ) -> Row {
        let (baseline, baseline_cpu) = baseline;
        let mut row = Row::measured(id, scenario, m, None, None);
        row.cpu_us_per_op = cpu;
        row.baseline = Some(format!("{} (CPU)", baseline.name));
        row.ratio = cpu
            .zip(baseline_cpu)
            .and_then(|(c, b)| (b > 0.0).then(|| c / b));
        row.target = target;
        row.met = target.and_then(|t| {
            t.met_with_cpu(row.ratio, row.latency.map(|l| l.p50_ms), row.cpu_us_per_op)
        });
        row
    }

    /// A row whose CPU column is `cpu` (a subset of the processes), with a target on it.
    pub fn cpu_of(
        id: &str,
        scenario: &str,
        m: &Measurement,
        cpu: Option<f64>,
        target: Option<Target>,
    ) -> Row {
        let mut row = Row::measured(id, scenario, m, None, None);
        row.cpu_us_per_op = cpu;
        row.target = target;
        row.met = target.and_then(|t| t.met_with_cpu(None, None, cpu));
        row
    }

    /// A row from a measurement, optionally compared with a baseline.
    pub fn measured(
        id: &str,
        scenario: &str,
        m: &Measurement,
        baseline: Option<&Measurement>,
        target: Option<Target>,
    ) -> Row {
        let latency = m.percentiles();
        let ratio = baseline.and_then(|b| stats::ratio(m.rps(), b.rps()));
        Row {
            id: id.to_owned(),
            scenario: scenario.to_owned(),
            concurrency: Some(m.concurrency),
            rps: Some(m.rps()),
            latency,
            errors: m.errors,
            first_error: m.first_error.clone(),
            baseline: baseline.map(|b| b.name.clone()),
            ratio,
            target,
            met: target.and_then(|t| t.met(ratio, latency.map(|l| l.p50_ms))),
            cpu_us_per_op: m.cpu_us_per_op(),
        }
    }
}

/// Memory figures.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    /// The lease-store after the load (peak = under load).
    pub lease_store: Option<Memory>,
    /// The guarded Envoy.
    pub envoy_with_filter: Option<Memory>,
    /// The plain Envoy.
    pub envoy_without_filter: Option<Memory>,
    /// Size of the filter's `.wasm`.
    pub wasm_bytes: u64,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The rows of the table.
    pub rows: Vec<Row>,
    /// Memory figures.
    pub memory: MemoryReport,
    /// The physical floor and each first-time row's fraction of it, when measured.
    pub floor: Option<Floor>,
    /// Where and how it ran.
    pub machine: Machine,
    /// Remarks on how to read the figures.
    pub notes: Vec<String>,
}

/// The machine the figures come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Anything the operator said about the run (e.g. a shared machine).
    pub note: Option<String>,
}

impl Machine {
    /// Reads the machine's description from `/proc`.
    pub fn describe(note: Option<String>) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_owned(), |(_, m)| m.trim().to_owned());
        Machine {
            cpu,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            note,
        }
    }
}

impl Report {
    /// The table as text (Markdown, so it pastes into `bench/README.md` as is).
    pub fn table(&self) -> String {
        let mut out = String::new();
        let (floor_head, floor_rule) = match self.floor {
            Some(_) => (" of floor |", "---|"),
            None => ("", ""),
        };
        let _ = writeln!(
            out,
            "| id | scenario | conc | rps | p50 ms | p99 ms | p99.9 ms | ratio | target | met? | CPU µs/op |{floor_head}\n\
             |---|---|---:|---:|---:|---:|---:|---:|---|---|---:|{floor_rule}",
        );
        for (index, row) in self.rows.iter().enumerate() {
            let num = |v: Option<f64>, digits: usize| {
                v.map_or_else(|| "—".to_owned(), |v| format!("{v:.digits$}"))
            };
            let _ = writeln!(
                out,
                "| {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{}",
                row.id,
                row.scenario,
                if row.errors > 0 {
                    format!(" ({} errors)", row.errors)
                } else {
                    String::new()
                },
                row.concurrency
                    .map_or_else(|| "—".to_owned(), |c| c.to_string()),
                num(row.rps, 0),
                num(row.latency.map(|l| l.p50_ms), 2),
                num(row.latency.map(|l| l.p99_ms), 2),
                num(row.latency.map(|l| l.p999_ms), 2),
                row.ratio.map_or_else(
                    || "—".to_owned(),
                    |r| format!("{r:.2} of {}", row.baseline.as_deref().unwrap_or("?"))
                ),
                row.target
                    .map_or_else(|| "report".to_owned(), Target::label),
                match row.met {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "—",
                },
                num(row.cpu_us_per_op, 0),
                self.floor
                    .as_ref()
                    .map_or_else(String::new, |floor| format!(" {} |", floor.cell(index))),
            );
        }
        let kib = |m: Option<Memory>| {
            m.map_or_else(
                || "—".to_owned(),
                |m| {
                    format!(
                        "{:.1} MiB (peak {:.1})",
                        m.rss_kib as f64 / 1024.0,
                        m.hwm_kib as f64 / 1024.0
                    )
                },
            )
        };
        let _ = writeln!(
            out,
            "\nMemory: lease-store {} · Envoy with filter {} · Envoy without {} · filter .wasm {:.0} KiB",
            kib(self.memory.lease_store),
            kib(self.memory.envoy_with_filter),
            kib(self.memory.envoy_without_filter),
            self.memory.wasm_bytes as f64 / 1024.0
        );
        let _ = writeln!(
            out,
            "Machine: {} × {} (loopback only), kernel {}{}",
            self.machine.cpus,
            self.machine.cpu,
            self.machine.kernel,
            self.machine
                .note
                .as_deref()
                .map_or_else(String::new, |n| format!(" — {n}"))
        );
        for note in &self.notes {
            let _ = writeln!(out, "- {note}");
        }
        out
    }

    /// Writes the report as JSON to `path` (parents created).
    pub fn write_json(&self, path: &Path) -> Result<(), BenchError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(BenchError::io(format!("create {}", parent.display())))?;
        }
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| BenchError::Input(format!("serialize the report: {e}")))?;
        std::fs::write(path, json).map_err(BenchError::io(format!("write {}", path.display())))
    }
}
