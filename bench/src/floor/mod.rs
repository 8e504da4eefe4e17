//! The physical floor under a first-time request (issue 50), measured in the same run as
//! the rows it judges, and each first-time row's fraction of it.
//!
//! - **Journal floor** ([`journal`]): Postgres' CPU per request when the store's own claim
//!   and finalize statements carry K requests each, K = 1…32, fitted to a·rows +
//!   b·statements ([`fit`]). With `c` requests in flight at most `c` share a statement,
//!   so the journal floor at concurrency `c` is the fit at K = min(c, 32): 2 rows and
//!   2/K statements per request.
//! - **Edge floor** ([`stub`]): Envoy, the filter and the upstream in front of a stub
//!   store that answers at once: the CPU and latency of everything but the journal.
//! - **Latency floor**: two flushes of the data directory ([`fsync`]), the claim's commit
//!   and the finalize's, plus the edge floor's median.
//!
//! A row's fraction is floor ÷ measured (1.0: at the floor), of CPU per request and of the
//! median: the store cycle (P1) and Postgres' share (P6) against the journal floor, the
//! guarded POST (P4, P5) against journal + edge. The latest figures:
//! `bench/README.md#the-floor`.

pub mod fit;
pub mod fsync;
pub mod journal;
pub mod stub;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::error::BenchError;
use crate::load::UniqueSource;
use crate::pgbench::Pgbench;
use crate::procfs::Watched;
use crate::report::Row;
use crate::rotation::{self, Drive, Measurement, Schedule, contender, load};
use crate::workload::{RequestTemplate, Workload};
use fit::{Fit, Point};

/// Flushes timed for the latency floor.
const FLUSHES: usize = 200;

/// What the floor is measured with.
pub struct Setup {
    /// pgbench on the stack's Postgres.
    pub pgbench: Pgbench,
    /// Postgres' processes.
    pub postgres: Vec<Watched>,
    /// A guarded first-time POST through an Envoy whose store is the stub, and the
    /// processes it crosses (that Envoy, the stub, the upstream).
    pub edge: Option<(RequestTemplate, Vec<Watched>)>,
    /// The Postgres data directory (for the flushes).
    pub data_dir: Option<PathBuf>,
}

/// One batch size at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct JournalPoint {
    /// Rows per statement.
    pub k: usize,
    /// Requests (K per script run) per second.
    pub requests_per_s: f64,
    /// Postgres CPU per request, microseconds.
    pub postgres_cpu_us_per_request: Option<f64>,
}

/// The journal floor at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct JournalFloor {
    /// pgbench clients.
    pub concurrency: usize,
    /// Each batch size's figures.
    pub points: Vec<JournalPoint>,
    /// a and b.
    pub fit: Option<Fit>,
    /// The fit at K = min(concurrency, 32): the rows' floor.
    pub cpu_us_per_request: Option<f64>,
}

/// The edge floor at one concurrency.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct EdgeFloor {
    /// Requests in flight.
    pub concurrency: usize,
    /// Guarded first-time POSTs per second through the stub.
    pub rps: f64,
    /// CPU of Envoy, the stub and the upstream per request, microseconds.
    pub cpu_us_per_request: Option<f64>,
    /// Median latency, milliseconds.
    pub p50_ms: Option<f64>,
}

/// A first-time row's fraction of the floor.
#[derive(Debug, Clone, Serialize)]
pub struct Fraction {
    /// The row's place in the report's rows.
    pub row: usize,
    /// Its id.
    pub id: String,
    /// Its concurrency.
    pub concurrency: Option<usize>,
    /// The floor's CPU per request ÷ the row's.
    pub cpu: Option<f64>,
    /// The floor's median ÷ the row's.
    pub p50: Option<f64>,
}

/// Everything the floor measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Floor {
    /// The journal floor per concurrency.
    pub journal: Vec<JournalFloor>,
    /// The edge floor per concurrency.
    pub edge: Vec<EdgeFloor>,
    /// The median 8 kB write + `fdatasync` in the data directory, milliseconds.
    pub flush_ms: Option<f64>,
    /// Each first-time row's fraction of the floor.
    pub fractions: Vec<Fraction>,
}

/// Rows per request: its claim's and its finalize's.
const ROWS: f64 = 2.0;

/// Statements a request's share comes to at K rows per statement.
fn statements(k: usize) -> f64 {
    ROWS / k as f64
}

impl Setup {
    /// Measures the floor at each of `concurrencies`: one rotation each, every batch size
    /// and the edge floor in the same rounds. Rows come back for the table.
    pub async fn measure(
        &self,
        concurrencies: &[usize],
        schedule: Schedule,
        unique: &Arc<UniqueSource>,
        notes: &mut Vec<String>,
    ) -> Result<(Floor, Vec<Row>), BenchError> {
        let mut floor = Floor {
            flush_ms: match &self.data_dir {
                Some(dir) => {
                    let dir = dir.clone();
                    let flush =
                        tokio::task::spawn_blocking(move || fsync::median_flush(&dir, FLUSHES))
                            .await
                            .map_err(|e| {
                                BenchError::Answer(format!("the flush task failed: {e}"))
                            })?;
                    match flush {
                        Ok(flush) => Some(flush.as_secs_f64() * 1e3),
                        Err(e) => {
                            notes.push(format!("latency floor not measured: {e}"));
                            None
                        }
                    }
                }
                None => None,
            },
            ..Floor::default()
        };
        let mut rows = Vec::new();
        for &c in concurrencies {
            let mut contenders = Vec::new();
            for k in journal::BATCHES {
                let pgbench = self
                    .pgbench
                    .with_script(&format!("floor_k{k}.sql"), &journal::script(k)?)?;
                contenders.push(
                    contender(
                        &format!("journal floor K={k}"),
                        Drive::Pgbench(pgbench),
                        c,
                        self.postgres.clone(),
                    )
                    .grouped(vec![("postgres", self.postgres.clone())]),
                );
            }
            if let Some((request, watched)) = &self.edge {
                contenders.push(load(
                    "edge floor",
                    Workload::Request(request.clone()),
                    c,
                    watched.clone(),
                ));
            }
            let m = rotation::rotate(&contenders, schedule, unique).await?;
            let (journal, edge) = m.split_at(journal::BATCHES.len());
            let journal_floor = journal_rows(&mut rows, c, journal);
            floor.journal.push(journal_floor);
            if let Some(edge) = edge.first() {
                rows.push(Row::measured(
                    "floor",
                    "edge floor: guarded first-time POST, stub store answering at once",
                    edge,
                    None,
                    None,
                ));
                floor.edge.push(EdgeFloor {
                    concurrency: c,
                    rps: edge.rps(),
                    cpu_us_per_request: edge.cpu_us_per_op(),
                    p50_ms: edge.percentiles().map(|p| p.p50_ms),
                });
            }
        }
        if let Some(flush) = floor.flush_ms {
            notes.push(format!(
                "latency floor: an 8 kB write + fdatasync in Postgres' data directory takes \
                 {flush:.2} ms (median of {FLUSHES}); a first-time request waits for two"
            ));
        }
        Ok((floor, rows))
    }
}

/// The journal floor's rows at concurrency `c` (K requests per pgbench transaction, so
/// rates and CPU are per request), and its fit.
fn journal_rows(rows: &mut Vec<Row>, c: usize, journal: &[Measurement]) -> JournalFloor {
    let mut points = Vec::new();
    for (k, m) in journal::BATCHES.iter().zip(journal) {
        let cpu = m.group_cpu_us_per_op("postgres").map(|cpu| cpu / *k as f64);
        let mut row = Row::measured(
            "floor",
            &format!("journal floor: the store's batch claim+finalize, K={k} rows per statement"),
            m,
            None,
            None,
        );
        row.rps = Some(m.rps() * *k as f64);
        row.cpu_us_per_op = cpu;
        rows.push(row);
        points.push(JournalPoint {
            k: *k,
            requests_per_s: m.rps() * *k as f64,
            postgres_cpu_us_per_request: cpu,
        });
    }
    let fitted = fit::fit(
        &points
            .iter()
            .filter_map(|p| {
                Some(Point {
                    rows: ROWS,
                    statements: statements(p.k),
                    cpu_us: p.postgres_cpu_us_per_request?,
                })
            })
            .collect::<Vec<_>>(),
    );
    let at = c.min(journal::BATCHES[journal::BATCHES.len() - 1]);
    let cpu_us_per_request = fitted.map(|f| f.cpu_us(ROWS, statements(at)));
    if let Some(f) = fitted {
        rows.push(Row {
            id: "floor".into(),
            scenario: format!(
                "journal floor fit: Postgres CPU per request = {:.1} µs × rows + {:.1} µs × \
                 statements; CPU column at K={at}",
                f.a_us_per_row, f.b_us_per_statement
            ),
            concurrency: Some(c),
            rps: None,
            latency: None,
            errors: 0,
            first_error: None,
            baseline: None,
            ratio: None,
            target: None,
            met: None,
            cpu_us_per_op: cpu_us_per_request,
        });
    }
    JournalFloor {
        concurrency: c,
        points,
        fit: fitted,
        cpu_us_per_request,
    }
}

impl Floor {
    /// Each first-time row's fraction of the floor at its concurrency.
    pub fn judge(&mut self, rows: &[Row]) {
        self.fractions = rows
            .iter()
            .enumerate()
            .filter_map(|(index, row)| self.fraction(index, row))
            .collect();
    }

    fn fraction(&self, index: usize, row: &Row) -> Option<Fraction> {
        let c = row.concurrency?;
        let with_edge = match row.id.as_str() {
            "P1" | "P6" => false,
            "P4" | "P5" => true,
            _ => return None,
        };
        let journal = self
            .journal
            .iter()
            .find(|j| j.concurrency == c)
            .and_then(|j| j.cpu_us_per_request);
        let edge = self.edge.iter().find(|e| e.concurrency == c);
        let (cpu, p50) = if with_edge {
            let edge = edge?;
            (
                journal.zip(edge.cpu_us_per_request).map(|(j, e)| j + e),
                self.flush_ms.zip(edge.p50_ms).map(|(f, e)| 2.0 * f + e),
            )
        } else {
            (journal, self.flush_ms.map(|f| 2.0 * f))
        };
        let of = |floor: Option<f64>, measured: Option<f64>| {
            floor
                .zip(measured)
                .and_then(|(f, m)| (m > 0.0).then(|| f / m))
        };
        Some(Fraction {
            row: index,
            id: row.id.clone(),
            concurrency: Some(c),
            cpu: of(cpu, row.cpu_us_per_op),
            p50: of(p50, row.latency.map(|l| l.p50_ms)),
        })
    }

    /// The "of floor" cell of row `index`.
    pub fn cell(&self, index: usize) -> String {
        let Some(fraction) = self.fractions.iter().find(|f| f.row == index) else {
            return "—".into();
        };
        let num = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.2}"));
        format!("CPU {} · p50 {}", num(fraction.cpu), num(fraction.p50))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Percentiles;

    fn row(id: &str, c: usize, cpu: f64, p50_ms: f64) -> Row {
        Row {
            id: id.into(),
            scenario: String::new(),
            concurrency: Some(c),
            rps: None,
            latency: Some(Percentiles {
                p50_ms,
                p99_ms: p50_ms,
                p999_ms: p50_ms,
                samples: 1,
            }),
            errors: 0,
            first_error: None,
            baseline: None,
            ratio: None,
            target: None,
            met: None,
            cpu_us_per_op: Some(cpu),
        }
    }

    #[test]
    fn first_time_rows_are_judged_against_their_part_of_the_floor() {
        let mut floor = Floor {
            journal: vec![JournalFloor {
                concurrency: 16,
                points: Vec::new(),
                fit: None,
                cpu_us_per_request: Some(100.0),
            }],
            edge: vec![EdgeFloor {
                concurrency: 16,
                rps: 1000.0,
                cpu_us_per_request: Some(300.0),
                p50_ms: Some(1.0),
            }],
            flush_ms: Some(0.5),
            fractions: Vec::new(),
        };
        let rows = [
            row("P1", 16, 200.0, 4.0),
            row("P4", 16, 800.0, 8.0),
            row("P2", 16, 50.0, 1.0),
            row("P6", 1, 100.0, 4.0),
        ];
        floor.judge(&rows);
        assert_eq!(floor.fractions.len(), 3, "{:?}", floor.fractions);
        // The store cycle against the journal alone: 100 of 200 µs, two flushes of 4 ms.
        assert_eq!(floor.fractions[0].cpu, Some(0.5));
        assert_eq!(floor.fractions[0].p50, Some(0.25));
        // The guarded POST against journal + edge: 400 of 800 µs, 2 of 8 ms.
        assert_eq!(floor.fractions[1].cpu, Some(0.5));
        assert_eq!(floor.fractions[1].p50, Some(0.25));
        assert_eq!(floor.cell(1), "CPU 0.50 · p50 0.25");
        // No journal floor measured at one connection: the row says so, not a guess.
        assert_eq!(floor.fractions[2].cpu, None);
        assert_eq!(floor.cell(2), "—");
        assert_eq!(floor.cell(3), "CPU — · p50 0.25");
    }

    /// A pgbench transaction of batch size K is K requests: rates and CPU are per request.
    #[test]
    fn journal_rows_count_requests_not_transactions() {
        // Exactly 40 µs a row and 300 µs a statement at every batch size.
        let measured: Vec<Measurement> = journal::BATCHES
            .iter()
            .map(|&k| {
                let per_request = 40.0 * ROWS + 300.0 * statements(k);
                Measurement {
                    name: format!("journal floor K={k} c=16"),
                    concurrency: 16,
                    ok: 1000,
                    errors: 0,
                    first_error: None,
                    elapsed: std::time::Duration::from_secs(1),
                    histogram: crate::stats::histogram(),
                    cpu_seconds: None,
                    group_cpu_seconds: vec![("postgres", per_request * 1000.0 * k as f64 / 1e6)],
                }
            })
            .collect();
        let mut rows = Vec::new();
        let floor = journal_rows(&mut rows, 16, &measured);
        assert_eq!(
            rows.len(),
            journal::BATCHES.len() + 1,
            "a row per K and the fit"
        );
        assert_eq!(floor.points[5].k, 32);
        assert_eq!(floor.points[5].requests_per_s, 32_000.0);
        assert_eq!(rows[5].rps, Some(32_000.0));
        let fit = floor.fit.expect("fitted");
        assert!((fit.a_us_per_row - 40.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.b_us_per_statement - 300.0).abs() < 1e-6, "{fit:?}");
        // At 16 connections the floor is the fit at K = 16: 80 + 300 × 2/16 µs.
        let at_16 = floor.cpu_us_per_request.expect("a floor");
        assert!((at_16 - 117.5).abs() < 1e-6, "{at_16}");
        assert_eq!(rows[6].cpu_us_per_op, Some(at_16));
    }

    #[test]
    fn the_floor_at_a_concurrency_shares_statements_among_that_many() {
        assert_eq!(statements(1), 2.0);
        assert_eq!(statements(16), 0.125);
    }
}
