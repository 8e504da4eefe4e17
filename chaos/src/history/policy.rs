//! [`PolicyFacts`]: the parts of the run's plugin configuration the judge's rows depend on
//! (cooldown, forgotten statuses, `uncertain`, staleness and retry budget), with the
//! filter's defaults for a history that does not name them.

use keyflight_filter::config::Uncertain;
use keyflight_filter::guarantee::{self, Cause};
use serde::{Deserialize, Serialize};

/// The parts of the run's plugin configuration the judge's rows depend on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFacts {
    /// `failure_cooldown_ms` (every policy of the run has the same).
    pub failure_cooldown_ms: u64,
    /// The upstream statuses released unrecorded (`forget_statuses`).
    pub forget_statuses: Vec<u16>,
    /// Paths under this prefix are guarded by an `uncertain: retry` policy; every other
    /// path by `uncertain: hold`, but those under `reconcile_prefix`.
    pub uncertain_retry_prefix: Option<String>,
    /// Paths under this prefix are guarded by an `uncertain: reconcile` policy (runs whose
    /// upstream keeps a ledger: `--upstream-effects`).
    #[serde(default)]
    pub reconcile_prefix: Option<String>,
    /// `edge_cache.max_staleness_ms`: how long after an operator change an edge may still
    /// serve the record as it was (`docs/stream-machine.md#the-edge-cache`).
    #[serde(default = "default_max_staleness_ms")]
    pub edge_max_staleness_ms: u64,
    /// `record_retry_budget_ms`: how long an outbox keeps resending a record before it may
    /// give it up (the give-up row needs it elapsed since the hand-off).
    #[serde(default = "default_record_retry_budget_ms")]
    pub record_retry_budget_ms: u64,
}

/// The filter's default `edge_cache.max_staleness_ms` (`filter/README.md#policy`).
pub fn default_max_staleness_ms() -> u64 {
    3000
}

/// The filter's default `record_retry_budget_ms` (`filter/README.md#policy`).
pub fn default_record_retry_budget_ms() -> u64 {
    120_000
}

impl Default for PolicyFacts {
    /// The filter's documented defaults (`filter/README.md#policy`) and `uncertain: hold`
    /// everywhere (the runs before the retry policy existed).
    fn default() -> Self {
        PolicyFacts {
            failure_cooldown_ms: 2000,
            forget_statuses: default_forget_statuses(),
            uncertain_retry_prefix: None,
            reconcile_prefix: None,
            edge_max_staleness_ms: default_max_staleness_ms(),
            record_retry_budget_ms: default_record_retry_budget_ms(),
        }
    }
}

impl PolicyFacts {
    /// Whether the run's plan guards `path` with a setting that never runs an operation
    /// again when its outcome is unknown (`hold`, `reconcile`: [`guarantee::at_most_once`]),
    /// whose lapsed leases are held `unknown`, never taken over. A history that names no
    /// retry prefix predates both the retry policy and holding lapses (its hold policies'
    /// lapsed leases were taken over), and says nothing here.
    pub fn held_at_most_once(&self, path: &str) -> bool {
        self.uncertain_retry_prefix.is_some() && guarantee::at_most_once(self.uncertain(path))
    }

    /// Whether `cause` lets a same-body retry of `path`'s operation run again, under the
    /// setting the plan guards it with (`docs/guarantee.md`'s table, [`guarantee::reruns`]).
    pub fn reruns(&self, cause: Cause, path: &str) -> bool {
        guarantee::reruns(cause, self.uncertain(path))
    }

    /// The `uncertain` setting the plan guards `path` with.
    pub fn uncertain(&self, path: &str) -> Uncertain {
        let under = |prefix: &Option<String>| {
            prefix
                .as_deref()
                .is_some_and(|prefix| path.starts_with(prefix))
        };
        if under(&self.uncertain_retry_prefix) {
            Uncertain::Retry
        } else if under(&self.reconcile_prefix) {
            Uncertain::Reconcile
        } else {
            Uncertain::Hold
        }
    }
}

/// The `forget_statuses` a policy has when it names none, as the guarantee lists them
/// (`docs/guarantee.md#every-answer-after-which-a-retry-runs-again`): every 3xx but 303,
/// every 4xx but 400, 404, 408, 409, 422 and 429.
pub fn default_forget_statuses() -> Vec<u16> {
    const KEPT: [u16; 7] = [303, 400, 404, 408, 409, 422, 429];
    (300..500).filter(|status| !KEPT.contains(status)).collect()
}
