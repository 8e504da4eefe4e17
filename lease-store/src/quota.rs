//! Each workload's storage quota (`docs/records.md#storage-quota`): how many records, and
//! how many recorded bytes, one workload may keep, so one caller cannot fill the database
//! every other caller's promise rests on.
//!
//! The claim path never counts: it reads the last measure from memory ([`Quota::check`]),
//! which a loop refreshes every `--storage-quota-interval` with one aggregate
//! (`store/usage.rs`). A workload may therefore pass its quota by what it claims within one
//! interval; the measure after that refuses it. Only a claim that would add a record is
//! refused (the API asks the store whether the record exists first): a retry of a request
//! that ran still gets its answer, and a settle is never refused.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::caller::BEARER_LABEL;
use crate::store::{Store, Usage};

/// What one workload may keep (`--storage-quota-records`, `--storage-quota-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSettings {
    /// Records of one workload, in any state.
    pub max_records: u64,
    /// Recorded response bytes of one workload.
    pub max_bytes: u64,
    /// Time between two measures.
    pub interval: Duration,
}

/// Which limit a workload reached, with its measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    /// Its records.
    #[error(
        "this workload keeps {used} records, its quota is {limit} (--storage-quota-records): \
         no new record until some expire or the quota is raised"
    )]
    Records {
        /// Records measured.
        used: u64,
        /// The quota.
        limit: u64,
    },
    /// Its recorded bytes.
    #[error(
        "this workload's records hold {used} bytes, its quota is {limit} \
         (--storage-quota-bytes): no new record until some expire or the quota is raised"
    )]
    Bytes {
        /// Bytes measured.
        used: u64,
        /// The quota.
        limit: u64,
    },
}

/// Whether `usage` leaves room for one more record under `settings`.
pub fn exceeded(usage: Usage, settings: &QuotaSettings) -> Option<Exceeded> {
    if usage.records >= settings.max_records {
        return Some(Exceeded::Records {
            used: usage.records,
            limit: settings.max_records,
        });
    }
    if usage.bytes >= settings.max_bytes {
        return Some(Exceeded::Bytes {
            used: usage.bytes,
            limit: settings.max_bytes,
        });
    }
    None
}

/// The quota and the last measure of every workload.
pub struct Quota {
    settings: QuotaSettings,
    /// Keyed by the metrics' workload label (a SPIFFE id, or [`BEARER_LABEL`]); `None`
    /// until the first measure.
    measured: RwLock<Option<HashMap<String, Usage>>>,
    gauges: QuotaGauges,
}

impl Quota {
    /// A quota with nothing measured yet (every workload is let in until the first measure).
    pub fn new(settings: QuotaSettings, gauges: QuotaGauges) -> Arc<Self> {
        Arc::new(Quota {
            settings,
            measured: RwLock::default(),
            gauges,
        })
    }

    /// Whether `workload` (`None`: a bearer caller) may add a record, by the last measure.
    pub fn check(&self, workload: Option<&str>) -> Result<(), Exceeded> {
        let label = workload.unwrap_or(BEARER_LABEL);
        let measured = self.measured.read().unwrap_or_else(|e| e.into_inner());
        match measured.as_ref().and_then(|measured| measured.get(label)) {
            Some(usage) => exceeded(*usage, &self.settings).map_or(Ok(()), Err),
            None => Ok(()),
        }
    }

    /// Counts a claim refused for `workload`'s quota.
    pub fn refused(&self, workload: Option<&str>) {
        self.gauges
            .refused
            .get_or_create(&WorkloadLabel::of(workload))
            .inc();
    }

    /// Replaces the measure with `usage` (every workload that keeps a record).
    pub fn measured(&self, usage: Vec<(Option<String>, Usage)>) {
        let mut fresh = HashMap::with_capacity(usage.len());
        for (workload, usage) in usage {
            let entry: &mut Usage = fresh
                .entry(workload.unwrap_or_else(|| BEARER_LABEL.to_owned()))
                .or_default();
            entry.records += usage.records;
            entry.bytes += usage.bytes;
            entry.unknown += usage.unknown;
        }
        let mut measured = self.measured.write().unwrap_or_else(|e| e.into_inner());
        for gone in measured
            .iter()
            .flatten()
            .filter(|(w, _)| !fresh.contains_key(*w))
        {
            self.gauges.set(gone.0, Usage::default());
        }
        for (workload, usage) in &fresh {
            self.gauges.set(workload, *usage);
        }
        *measured = Some(fresh);
    }

    /// Records in `unknown` at the last measure, as `keyflight_store_workload_unknown_records`
    /// says: `workload`'s, or every workload's summed; `None` before the first measure.
    pub fn unknown_records(&self, workload: Option<&str>) -> Option<u64> {
        let measured = self.measured.read().unwrap_or_else(|e| e.into_inner());
        let measured = measured.as_ref()?;
        Some(match workload {
            Some(workload) => measured.get(workload).map_or(0, |usage| usage.unknown),
            None => measured.values().map(|usage| usage.unknown).sum(),
        })
    }

    /// Spawns the loop that measures every `--storage-quota-interval` until `shutdown`; a
    /// failed measure is logged and the last one kept.
    pub fn spawn_measuring(
        self: &Arc<Self>,
        store: Store,
        mut shutdown: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        let quota = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(quota.settings.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !*shutdown.borrow() {
                tokio::select! {
                    _ = ticks.tick() => {}
                    Ok(()) = shutdown.changed() => continue,
                }
                match store.workload_usage().await {
                    Ok(usage) => quota.measured(usage),
                    Err(error) => tracing::warn!(%error, "storage quota: measuring failed"),
                }
            }
        })
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkloadLabel {
    workload: String,
}

impl WorkloadLabel {
    fn of(workload: Option<&str>) -> Self {
        WorkloadLabel {
            workload: workload.unwrap_or(BEARER_LABEL).to_owned(),
        }
    }
}

/// The quota's metrics: each workload's measure, and the claims it refused.
#[derive(Debug, Clone, Default)]
pub struct QuotaGauges {
    records: Family<WorkloadLabel, Gauge>,
    bytes: Family<WorkloadLabel, Gauge>,
    unknown: Family<WorkloadLabel, Gauge>,
    refused: Family<WorkloadLabel, Counter>,
}

impl QuotaGauges {
    /// Registers the families in the store's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "keyflight_store_workload_records",
            "Records each workload keeps, at the last storage quota measure",
            self.records.clone(),
        );
        registry.register(
            "keyflight_store_workload_record_bytes",
            "Recorded response bytes each workload keeps, at the last storage quota measure",
            self.bytes.clone(),
        );
        registry.register(
            "keyflight_store_workload_unknown_records",
            "Records in unknown each workload made (the operator's queue), at the last storage quota measure",
            self.unknown.clone(),
        );
        registry.register(
            "keyflight_store_storage_quota_refused",
            "Claims refused with 507 storage_quota (they would have added a record), by workload",
            self.refused.clone(),
        );
    }

    fn set(&self, workload: &str, usage: Usage) {
        let label = WorkloadLabel {
            workload: workload.to_owned(),
        };
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.records.get_or_create(&label).set(clamp(usage.records));
        self.bytes.get_or_create(&label).set(clamp(usage.bytes));
        self.unknown.get_or_create(&label).set(clamp(usage.unknown));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: QuotaSettings = QuotaSettings {
        max_records: 3,
        max_bytes: 100,
        interval: Duration::from_secs(60),
    };

    fn usage(records: u64, bytes: u64) -> Usage {
        Usage {
            records,
            bytes,
            unknown: 0,
        }
    }

    #[test]
    fn a_workload_below_both_limits_may_add_a_record() {
        assert_eq!(exceeded(usage(2, 99), &SETTINGS), None);
    }

    #[test]
    fn reaching_either_limit_refuses_the_next_record() {
        assert_eq!(
            exceeded(usage(3, 0), &SETTINGS),
            Some(Exceeded::Records { used: 3, limit: 3 })
        );
        assert_eq!(
            exceeded(usage(0, 100), &SETTINGS),
            Some(Exceeded::Bytes {
                used: 100,
                limit: 100
            })
        );
    }

    #[test]
    fn each_workload_is_held_to_its_own_measure_and_bearers_share_one() {
        let quota = Quota::new(SETTINGS, QuotaGauges::default());
        quota.measured(vec![
            (Some("spiffe://a".into()), usage(3, 0)),
            (None, usage(1, 0)),
        ]);
        assert!(quota.check(Some("spiffe://a")).is_err());
        assert!(quota.check(Some("spiffe://b")).is_ok(), "never measured");
        assert!(quota.check(None).is_ok());
        quota.measured(vec![(None, usage(5, 0))]);
        assert!(
            quota.check(Some("spiffe://a")).is_ok(),
            "its records are gone"
        );
        assert!(quota.check(None).is_err());
    }

    #[test]
    fn the_unknown_records_are_summed_or_one_workloads_once_measured() {
        let quota = Quota::new(SETTINGS, QuotaGauges::default());
        assert_eq!(quota.unknown_records(None), None, "not measured yet");
        let unknown = |unknown| Usage {
            unknown,
            ..Usage::default()
        };
        quota.measured(vec![
            (Some("spiffe://a".into()), unknown(2)),
            (None, unknown(1)),
        ]);
        assert_eq!(quota.unknown_records(None), Some(3));
        assert_eq!(quota.unknown_records(Some("spiffe://a")), Some(2));
        assert_eq!(quota.unknown_records(Some("spiffe://b")), Some(0));
    }
}
