//! How many calls each batch carried: a histogram per kind for `/metrics`,
//! and running totals a test (or an operator's debugger) can read directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::BatchKind;

/// The `kind` label of [`BatchSizes`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabel {
    kind: &'static str,
}

/// The histogram family behind [`BatchSizes`].
pub type BatchSizeFamily = Family<BatchLabel, Histogram, fn() -> Histogram>;

/// How many calls each batch carried, per kind: the store records, `/metrics`
/// exposes (`keyflight_store_batch_size`), and [`BatchSizes::totals`] sums up.
/// Cheap to clone; clones share counts.
#[derive(Debug, Clone)]
pub struct BatchSizes {
    histograms: BatchSizeFamily,
    /// Per kind (claims, finalizes): batches run, calls carried, largest batch.
    totals: Arc<[[AtomicU64; 3]; 2]>,
}

/// Totals of one kind's batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTotals {
    /// Batches run (a call run alone by a worker counts as a batch of one).
    pub batches: u64,
    /// Calls those batches carried.
    pub calls: u64,
    /// The most calls one batch carried.
    pub largest: u64,
}

impl Default for BatchSizes {
    fn default() -> Self {
        BatchSizes {
            histograms: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1.0, 2.0, 8))
            }),
            totals: Arc::default(),
        }
    }
}

impl BatchSizes {
    /// The histograms, for registering with a metrics registry.
    pub fn family(&self) -> BatchSizeFamily {
        self.histograms.clone()
    }

    /// Batches of `kind` run so far, and the calls they carried.
    pub fn totals(&self, kind: BatchKind) -> BatchTotals {
        let [batches, calls, largest] = &self.totals[kind as usize];
        BatchTotals {
            batches: batches.load(Ordering::Relaxed),
            calls: calls.load(Ordering::Relaxed),
            largest: largest.load(Ordering::Relaxed),
        }
    }

    pub(super) fn observe(&self, kind: BatchKind, calls: usize) {
        self.histograms
            .get_or_create(&label(kind))
            .observe(calls as f64);
        let calls = u64::try_from(calls).unwrap_or(u64::MAX);
        let [batches, total, largest] = &self.totals[kind as usize];
        batches.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(calls, Ordering::Relaxed);
        largest.fetch_max(calls, Ordering::Relaxed);
    }
}

fn label(kind: BatchKind) -> BatchLabel {
    BatchLabel {
        kind: kind.as_str(),
    }
}
