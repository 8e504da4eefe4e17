//! Latency histograms and the arithmetic of the results table: percentiles, rates, ratios.
//!
//! Latencies are recorded in microseconds in an HdrHistogram (3 significant digits, up to
//! 60 s), so merging rounds and workers is exact and a p99.9 costs nothing to keep.
//!
//! Closed-loop latency correction: a closed-loop worker waits for each answer before sending
//! the next request, so during a stall it sends nothing and the stall shows up as ONE slow
//! sample instead of the many an open-loop client would have seen ("coordinated omission").
//! [`Recorder`] records with [`Histogram::record_correct`], back-filling the samples that a
//! client sending every `expected interval` would have recorded; the expected interval is the
//! median latency of the scenario's own warm-up round (the rate one worker naturally runs at).
//! Throughput is never corrected: it is requests completed over wall time.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The highest latency a histogram tracks: 60 s in microseconds.
const MAX_MICROS: u64 = 60_000_000;

/// A fresh latency histogram (microseconds).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3)
        .unwrap_or_else(|_| unreachable!("1..=60e6 with 3 significant digits is a valid range"))
}

/// Records latencies into a histogram, corrected for coordinated omission when an
/// expected interval is known.
#[derive(Debug, Clone)]
pub struct Recorder {
    histogram: Histogram<u64>,
    expected_interval_us: Option<u64>,
}

impl Recorder {
    /// A recorder; `expected_interval` enables the closed-loop correction.
    pub fn new(expected_interval: Option<Duration>) -> Recorder {
        Recorder {
            histogram: histogram(),
            expected_interval_us: expected_interval.map(micros).filter(|us| *us > 0),
        }
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let us = micros(latency).clamp(1, MAX_MICROS);
        // Both only fail for a value outside the histogram's range, which the clamp excludes.
        let _ = match self.expected_interval_us {
            Some(interval) => self.histogram.record_correct(us, interval),
            None => self.histogram.record(us),
        };
    }

    /// The histogram recorded so far.
    pub fn into_histogram(self) -> Histogram<u64> {
        self.histogram
    }
}

/// Whole microseconds of `d`, saturating.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The latency columns of one table row, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Samples behind the percentiles (corrected samples included).
    pub samples: u64,
}

impl Percentiles {
    /// The percentiles of `histogram`; `None` when it is empty.
    pub fn of(histogram: &Histogram<u64>) -> Option<Percentiles> {
        if histogram.is_empty() {
            return None;
        }
        let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
        Some(Percentiles {
            p50_ms: ms(0.50),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            samples: histogram.len(),
        })
    }
}

/// Completed operations per second.
pub fn rate(operations: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        operations as f64 / secs
    } else {
        0.0
    }
}

/// `candidate / baseline`, `None` when the baseline measured nothing.
pub fn ratio(candidate: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0).then(|| candidate / baseline)
}

/// Whether a measured value meets its target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// The ratio to the baseline must be at least this.
    RatioAtLeast {
        /// The lower bound.
        min: f64,
    },
    /// The median latency must be at most this many milliseconds.
    P50AtMostMs {
        /// The upper bound.
        max: f64,
    },
    /// The ratio to the baseline (of CPU per operation) must be at most this.
    RatioAtMost {
        /// The upper bound.
        max: f64,
    },
    /// CPU per operation must be at most this many microseconds.
    CpuAtMostUs {
        /// The upper bound.
        max: f64,
    },
}

impl Target {
    /// Checks the target against a row's ratio and median.
    pub fn met(self, ratio: Option<f64>, p50_ms: Option<f64>) -> Option<bool> {
        self.met_with_cpu(ratio, p50_ms, None)
    }

    /// [`Target::met`], for targets on CPU per operation too.
    pub fn met_with_cpu(
        self,
        ratio: Option<f64>,
        p50_ms: Option<f64>,
        cpu_us_per_op: Option<f64>,
    ) -> Option<bool> {
        match self {
            Target::RatioAtLeast { min } => ratio.map(|r| r >= min),
            Target::P50AtMostMs { max } => p50_ms.map(|p| p <= max),
            Target::RatioAtMost { max } => ratio.map(|r| r <= max),
            Target::CpuAtMostUs { max } => cpu_us_per_op.map(|c| c <= max),
        }
    }

    /// How the target reads in the table.
    pub fn label(self) -> String {
        match self {
            Target::RatioAtLeast { min } => format!(">= {min:.2}"),
            Target::P50AtMostMs { max } => format!("p50 <= {max} ms"),
            Target::RatioAtMost { max } => format!("<= {max:.2}"),
            Target::CpuAtMostUs { max } => format!("CPU <= {max:.0} µs"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_latencies() {
        let mut recorder = Recorder::new(None);
        for ms in 1..=1000 {
            recorder.record(Duration::from_millis(ms));
        }
        let p = Percentiles::of(&recorder.into_histogram()).expect("not empty");
        assert!((p.p50_ms - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.p99_ms - 990.0).abs() < 1.0, "{p:?}");
        assert!((p.p999_ms - 999.0).abs() < 1.0, "{p:?}");
        assert_eq!(p.samples, 1000);
        assert_eq!(Percentiles::of(&histogram()), None);
    }

    #[test]
    fn a_stall_is_back_filled_when_the_expected_interval_is_known() {
        let mut plain = Recorder::new(None);
        let mut corrected = Recorder::new(Some(Duration::from_millis(1)));
        for recorder in [&mut plain, &mut corrected] {
            for _ in 0..99 {
                recorder.record(Duration::from_millis(1));
            }
            recorder.record(Duration::from_millis(100));
        }
        let plain = Percentiles::of(&plain.into_histogram()).expect("samples");
        let corrected = Percentiles::of(&corrected.into_histogram()).expect("samples");
        assert_eq!(plain.samples, 100);
        assert!(
            plain.p99_ms < 1.1,
            "uncorrected, one stall is 1% of samples: {plain:?}"
        );
        // The 100 ms stall stood for 99 more requests an open-loop client would have sent.
        assert_eq!(corrected.samples, 199);
        assert!(corrected.p99_ms > 90.0, "corrected: {corrected:?}");
    }

    #[test]
    fn rates_ratios_and_targets() {
        assert_eq!(rate(500, Duration::from_secs(2)), 250.0);
        assert_eq!(rate(5, Duration::ZERO), 0.0);
        assert_eq!(ratio(90.0, 100.0), Some(0.9));
        assert_eq!(ratio(1.0, 0.0), None);
        let target = Target::RatioAtLeast { min: 0.9 };
        assert_eq!(target.met(Some(0.9), None), Some(true));
        assert_eq!(target.met(Some(0.89), None), Some(false));
        assert_eq!(target.met(None, Some(1.0)), None);
        let target = Target::P50AtMostMs { max: 5.0 };
        assert_eq!(target.met(None, Some(4.9)), Some(true));
        assert_eq!(target.met(None, Some(5.1)), Some(false));
    }
}
