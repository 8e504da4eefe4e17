//! The closed-loop load driver: a fixed number of workers, each with its own connection,
//! each sending its next request when the previous answer arrived.
//!
//! Why closed loop at fixed concurrency rather than open loop at a target rate: the
//! baselines are measured that way. `pgbench -c N` is a closed loop of N clients, and the
//! issue's question is "how close to Postgres' own throughput at the same concurrency"; a
//! throughput ratio is only meaningful when both sides are driven alike. An open-loop
//! generator answers a different question (latency at a chosen rate) and, at a rate above
//! capacity, measures queueing in the generator. The closed loop's blind spot, stalls that
//! hide the requests that would have queued behind them, is covered by the latency
//! correction in [`crate::stats::Recorder`].
//!
//! A round is bounded by wall time and by a request count, whichever comes first. Workers
//! connect before the clock starts (a barrier releases them together), so connection set-up
//! is not measured. A failed iteration counts as an error (first message kept) and the
//! worker reconnects: a broken connection must not end the round silently.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Barrier;

use crate::error::BenchError;
use crate::stats::{self, Recorder};
use crate::workload::{Session, Workload};

/// When a round stops.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Wall time after which no new request starts.
    pub duration: Duration,
    /// Requests after which no new request starts.
    pub max_requests: u64,
}

/// What one round measured.
#[derive(Debug, Clone)]
pub struct RoundResult {
    /// Iterations that succeeded.
    pub ok: u64,
    /// Iterations that failed.
    pub errors: u64,
    /// The first failure's message.
    pub first_error: Option<String>,
    /// From the barrier to the last worker's end.
    pub elapsed: Duration,
    /// Latencies of successful iterations, in microseconds.
    pub histogram: Histogram<u64>,
}

/// Hands out values no other iteration of this process uses (`{unique}`).
#[derive(Debug)]
pub struct UniqueSource {
    prefix: String,
    next: AtomicU64,
}

impl UniqueSource {
    /// A source whose values start with `prefix` (make it unique per run).
    pub fn new(prefix: String) -> UniqueSource {
        UniqueSource {
            prefix,
            next: AtomicU64::new(0),
        }
    }

    /// The next unique value.
    pub fn next(&self) -> String {
        format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// Runs `workload` with `concurrency` workers until `bounds`; latencies are corrected for
/// coordinated omission with `expected_interval` when given.
pub async fn run(
    workload: Arc<Workload>,
    unique: Arc<UniqueSource>,
    concurrency: usize,
    bounds: Bounds,
    expected_interval: Option<Duration>,
) -> Result<RoundResult, BenchError> {
    let concurrency = concurrency.max(1);
    let barrier = Arc::new(Barrier::new(concurrency + 1));
    let started = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let connection = workload.open().await?;
        let worker = Worker {
            workload: Arc::clone(&workload),
            unique: Arc::clone(&unique),
            started: Arc::clone(&started),
            bounds,
            recorder: Recorder::new(expected_interval),
        };
        let barrier = Arc::clone(&barrier);
        workers.push(tokio::spawn(async move {
            barrier.wait().await;
            worker.run(connection).await
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut result = RoundResult {
        ok: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        histogram: stats::histogram(),
    };
    for worker in workers {
        let outcome = worker
            .await
            .map_err(|e| BenchError::Answer(format!("a load worker panicked: {e}")))?;
        result.ok += outcome.ok;
        result.errors += outcome.errors;
        if result.first_error.is_none() {
            result.first_error = outcome.first_error;
        }
        // Same bounds and precision on both sides: adding cannot fail.
        let _ = result.histogram.add(outcome.histogram);
    }
    result.elapsed = start.elapsed();
    Ok(result)
}

struct Worker {
    workload: Arc<Workload>,
    unique: Arc<UniqueSource>,
    started: Arc<AtomicU64>,
    bounds: Bounds,
    recorder: Recorder,
}

struct WorkerOutcome {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    histogram: Histogram<u64>,
}

impl Worker {
    async fn run(mut self, connection: Session) -> WorkerOutcome {
        let deadline = Instant::now() + self.bounds.duration;
        let mut connection = Some(connection);
        let (mut ok, mut errors, mut first_error) = (0, 0, None);
        while Instant::now() < deadline
            && self.started.fetch_add(1, Ordering::Relaxed) < self.bounds.max_requests
        {
            let unique = self.unique.next();
            let begin = Instant::now();
            let outcome = match connection.as_mut() {
                Some(open) => self.workload.run_once(open, &unique).await,
                None => match self.workload.open().await {
                    Ok(open) => {
                        self.workload
                            .run_once(connection.insert(open), &unique)
                            .await
                    }
                    Err(e) => Err(e),
                },
            };
            match outcome {
                Ok(()) => {
                    self.recorder.record(begin.elapsed());
                    ok += 1;
                }
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                    // The connection may be broken mid-answer: start afresh.
                    connection = None;
                }
            }
        }
        WorkerOutcome {
            ok,
            errors,
            first_error,
            histogram: self.recorder.into_histogram(),
        }
    }
}
