//! The run's plan, drawn from one seed: which keys start when, who calls them how, and which
//! faults come in which order. Pure: the same seed and settings give the same plan (a unit
//! test holds it to that), so `--seed N` replays a run's workload and fault schedule. The
//! processes' timing is real, so the *history* of a replay differs in detail; the plan is
//! what a replay keeps.
//!
//! Per key (see [`KeyPlan`]): two or three **first callers** start together, one per Envoy
//! in turn (concurrent duplicates across proxies, all with the same `host`, so one scope);
//! some of them are **impatient**, with a first timeout shorter than the upstream's delay
//! (they give up mid-request, then retry); once the first callers are done a **late caller**
//! retries the key (a retry of a key that already answered); a few keys also get a
//! **conflict caller**, the same key with another body, which must get 409. Every caller
//! retries what was not an answer (503, a timeout, a refused or reset connection), up to
//! [`MAX_ATTEMPTS`], through an Envoy drawn per attempt.
//!
//! Faults (see [`FaultStep`]) run one after another: a pause, then a fault held for a while,
//! then healed, then the next pause.
//!
//! This file holds the plan's types and [`draw`]; `keys.rs` draws the keys and their
//! callers, `faults.rs` the fault schedule.

mod faults;
mod keys;

use faults::draw_faults;
use keys::draw_keys;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use crate::history::{FaultKind, Role};

/// Attempts per caller, the first included.
pub const MAX_ATTEMPTS: u32 = 4;

/// A patient caller's timeout: above the filter's longest claim wait (its 1 s call timeout
/// plus the 5 s follower wait) and the slowest upstream delay.
pub const PATIENT_TIMEOUT_MS: u64 = 8000;

/// The path prefix of the chaos plugin's `uncertain: retry` policy (`/payments` holds):
/// a key's path says which policy guards it.
pub const RETRY_PREFIX: &str = "/payments/retry";

/// The path prefix of the chaos plugin's `uncertain: reconcile` policy, in runs whose
/// upstream keeps a ledger to answer the question (`--upstream-effects`).
pub const RECONCILE_PREFIX: &str = "/payments/reconcile";

/// Which `uncertain` setting guards a key (`filter/README.md#policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Uncertain {
    /// The default: an uncertain outcome is held `unknown`.
    Hold,
    /// An uncertain outcome cools down, then runs again.
    Retry,
    /// The service is asked what happened.
    Reconcile,
}

/// What the upstream does with a key's requests, asked for in the request's query
/// (`demo-upstream/src/app.rs`), so the path (and scope) says it and the upstream's
/// execution log records what it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamAnswer {
    /// 201 after the key's delay.
    Created,
    /// `303 See Other`: recorded and replayed.
    SeeOther,
    /// `302 Found`: forgotten by default, so every request runs again.
    Found,
    /// `422`: a recorded 4xx, replayed.
    Unprocessable,
    /// `503` from the upstream: a retryable failure, one re-run per cooldown.
    Unavailable,
    /// The first execution drops its connection without an answer (`?abort=`): an
    /// uncertain outcome (`hold`: `unknown`; `retry`: one re-run after the cooldown).
    Reset,
    /// 201 after a delay longer than the lease: the lease is renewed, nothing runs twice.
    PastTheLease,
}

impl UpstreamAnswer {
    /// The `status=` the request asks for, when not 201.
    fn status(self) -> Option<u16> {
        match self {
            UpstreamAnswer::SeeOther => Some(303),
            UpstreamAnswer::Found => Some(302),
            UpstreamAnswer::Unprocessable => Some(422),
            UpstreamAnswer::Unavailable => Some(503),
            UpstreamAnswer::Created | UpstreamAnswer::Reset | UpstreamAnswer::PastTheLease => None,
        }
    }
}

/// What shapes a plan besides the seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// How long keys keep starting and faults keep coming.
    pub duration_ms: u64,
    /// The policy's lease (late callers come back within two leases).
    pub lease_ms: u64,
    /// The policy's renew interval: how long a link fault may last and every lease still
    /// be renewed in time ([`renewable`](faults::renewable)).
    pub renew_interval_ms: u64,
    /// The filter's call timeout: a freeze lasts longer than this.
    pub call_timeout_ms: u64,
    /// Lease-store replicas and Envoys (two each).
    pub replicas: usize,
    /// The kinds of fault to inject (none: a control run).
    pub fault_kinds: Vec<FaultKind>,
    /// Whether some callers give up mid-request.
    pub give_up: bool,
    /// Postgres partitions (0: one database): a postgres-crash kills one of them.
    pub partitions: usize,
    /// The plugin has an `uncertain: reconcile` policy ([`RECONCILE_PREFIX`]).
    pub reconcile: bool,
}

/// One caller: a sequence of attempts with one key, body and path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallerPlan {
    /// Unique in the run.
    pub name: String,
    /// Why it calls.
    pub role: Role,
    /// First callers: after the key's start; late and conflict callers: after the first
    /// callers are done.
    pub start_after_ms: u64,
    /// The Envoy of each attempt.
    pub envoys: Vec<usize>,
    /// The first attempt's timeout (shorter than the delay for an impatient caller).
    pub first_timeout_ms: u64,
    /// The pause before each retry when the answer gave no `Retry-After` (jitter).
    pub backoff_ms: Vec<u64>,
}

/// One key and its callers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyPlan {
    /// The idempotency key.
    pub key: String,
    /// When its first callers start.
    pub start_ms: u64,
    /// The upstream's delay for this key (part of the path, hence of the scope).
    pub delay_ms: u64,
    /// The amount in the body (unique per key; the conflict body adds one).
    pub amount: u64,
    /// What the upstream answers.
    pub answer: UpstreamAnswer,
    /// The policy that guards it.
    pub uncertain: Uncertain,
    /// Its callers.
    pub callers: Vec<CallerPlan>,
}

impl KeyPlan {
    /// The request path: the policy's prefix, and in the query the delay and what the
    /// upstream is to answer.
    pub fn path(&self) -> String {
        let mut query = Vec::new();
        if self.delay_ms > 0 {
            query.push(format!("delay_ms={}", self.delay_ms));
        }
        if let Some(status) = self.answer.status() {
            query.push(format!("status={status}"));
        }
        if self.answer == UpstreamAnswer::Reset {
            query.push(format!("abort={}", self.key));
        }
        let prefix = match self.uncertain {
            Uncertain::Retry => RETRY_PREFIX,
            Uncertain::Reconcile => RECONCILE_PREFIX,
            Uncertain::Hold => "/payments",
        };
        match query.is_empty() {
            true => prefix.to_owned(),
            false => format!("{prefix}?{}", query.join("&")),
        }
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FaultStep {
    /// The pause before it (after the previous fault healed).
    pub gap_ms: u64,
    /// What to do.
    pub kind: FaultKind,
    /// To which replica (0 for Postgres).
    pub target: usize,
    /// How long the part stays down or frozen before it is healed.
    pub hold_ms: u64,
    /// The next step is injected while this one holds (after the next step's gap, or
    /// half this hold, whichever is shorter), and both are healed together: two faults at
    /// once. Only drawn when the two break different parts ([`FaultStep::part`]).
    pub overlaps_next: bool,
}

/// The part of the stack a fault breaks: two faults at once must break different ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A lease-store replica.
    Store(usize),
    /// An Envoy.
    Envoy(usize),
    /// The database.
    Postgres,
}

impl FaultStep {
    /// What it breaks.
    pub fn part(&self) -> Part {
        match self.kind {
            FaultKind::StoreKill | FaultKind::StoreFreeze => Part::Store(self.target),
            FaultKind::EnvoyKill
            | FaultKind::PluginPush
            | FaultKind::ProxyPartition
            | FaultKind::OneWayLoss
            | FaultKind::SlowLink
            | FaultKind::EnvoyDrain
            | FaultKind::WasmUpgrade
            | FaultKind::RollingUpgrade
            | FaultKind::EnvoyHotRestart => Part::Envoy(self.target),
            FaultKind::StoreDbPartition
            | FaultKind::OperatorErase
            | FaultKind::OperatorResolve
            | FaultKind::OperatorResolveFailed => Part::Store(self.target),
            FaultKind::PostgresCrash | FaultKind::PostgresFreeze | FaultKind::PrimaryNodeDeath => {
                Part::Postgres
            }
        }
    }
}

/// The whole plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The settings it was drawn for.
    pub settings: Settings,
    /// The keys, by start time.
    pub keys: Vec<KeyPlan>,
    /// The faults, in order (more than the run may reach: it stops at its duration).
    pub faults: Vec<FaultStep>,
}

/// Draws the plan for `seed`.
pub fn draw(seed: u64, settings: &Settings) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = draw_keys(&mut rng, settings);
    let faults = draw_faults(&mut rng, settings);
    Plan {
        seed,
        settings: settings.clone(),
        keys,
        faults,
    }
}

/// One of `choices`, drawn by weight.
fn weighted<T: Copy>(rng: &mut StdRng, choices: &[(T, u32)]) -> T {
    let total: u32 = choices.iter().map(|(_, weight)| weight).sum();
    let mut pick = rng.random_range(0..total.max(1));
    for (choice, weight) in choices {
        if pick < *weight {
            return *choice;
        }
        pick -= weight;
    }
    choices[0].0
}

#[cfg(test)]
mod tests;
