//! The history checker: a pure function from what a run recorded ([`History`]) to what it
//! means ([`Report`]). No I/O, no clock. It is split along its three seams, each its own
//! file so that each can be read (and trusted) alone:
//!
//! - `evidence.rs`: the facts, read from the components' own logs — which claim won each
//!   scope with which fence and *how*, which settle calls landed, were handed off or
//!   given up, and when. Windows of time prove nothing by themselves; these facts do.
//! - `judgement.rs`: each key's record reconstructed from those facts and held to the
//!   guarantee table row by row (`docs/guarantee.md#where-it-is-at-least-once`), in the
//!   words of `verdict.rs`: a second execution passes only when every condition of one row
//!   is shown (`rerun.rs`; the rows a settle's release opens in `settled.rs`); a divergent answer,
//!   a record that no longer answers as it must (a 2xx or a recorded 4xx that does not
//!   replay, an `unknown` that is no longer `unknown`, a conflict that no longer
//!   conflicts) and an `unknown` record that ran again are each judged on their own.
//!   The partition row's own conditions are in `partition.rs`; the proxy-lifecycle
//!   faults' (a drain's `SIGTERM`, a module push that destroys a VM) in `lifecycle.rs`;
//!   what an operator's erase or resolve allows (a re-run after an erase, answers judged
//!   between a key's changes, modulo the edge cache's staleness bound) in `operator.rs`;
//!   what every takeover row needs on evidence the system under test cannot fake (the
//!   plan's policy, a lease run out from its last renew, no replay before the takeover, an
//!   outbox's spent budget) in `takeover.rs`; the service's `absent` under `uncertain:
//!   reconcile` in `reconcile.rs`; the re-runs of a hold or reconcile key whose first run
//!   the upstream shows committed, counted apart as certain doubles, in `doubles.rs`.
//! - `report.rs`: the findings summed up per fault kind for the table.
//!
//! The judge's own tests are a corpus of small histories (`chaos/tests/corpus/`): one per
//! excused row, which must pass, and one per way a history can look innocent while
//! breaking the guarantee, which must fail (`corpus.rs`); the rules' details are unit
//! tests (`tests.rs`).

pub mod evidence;
pub mod judgement;
mod lifecycle;
mod operator;
mod partition;
mod reconcile;
pub mod report;
mod rerun;
mod settled;
mod takeover;
pub mod verdict;

#[cfg(test)]
mod corpus;
mod doubles;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

pub use report::{Column, Counts, Report};
pub use takeover::setting_name;
pub use verdict::{CooldownCause, KeyVerdict, RerunVerdict, Row};

use crate::history::{Attempt, Execution, History};
use judgement::{KeyFacts, judge_key};

/// Checks a run's history.
pub fn check(history: &History) -> Report {
    let attempts_by_id: HashMap<&str, &Attempt> = history
        .attempts
        .iter()
        .map(|attempt| (attempt.id.as_str(), attempt))
        .collect();
    let verdicts = by_key(history)
        .into_iter()
        .map(|(key, (attempts, executions))| {
            let facts = KeyFacts {
                key,
                attempts: &attempts,
                executions,
            };
            judge_key(facts, history, &attempts_by_id)
        })
        .collect();
    Report::new(history, verdicts)
}

/// Each key's attempts and executions (the checks' own executions count too: a record
/// that died with its proxy may be re-run first by the check).
fn by_key(history: &History) -> BTreeMap<&str, (Vec<&Attempt>, Vec<&Execution>)> {
    let mut keys: BTreeMap<&str, (Vec<&Attempt>, Vec<&Execution>)> = BTreeMap::new();
    for attempt in &history.attempts {
        keys.entry(&attempt.key).or_default().0.push(attempt);
    }
    for execution in history
        .executions
        .iter()
        .chain(&history.verification_executions)
    {
        if let Some(key) = &execution.key {
            keys.entry(key).or_default().1.push(execution);
        }
    }
    keys
}
