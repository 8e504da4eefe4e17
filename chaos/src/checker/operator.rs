//! The operator rows: what an erase or a resolve allows, on evidence only
//! (`docs/guarantee.md#operator-changes`).
//!
//! A change counts only when it is *shown*: the run's record of the action says the admin
//! API answered 200 for the scope, and a lease-store logged that very change committed
//! (`evidence=operator` with its `action`, `lease-store/src/evidence.rs`) while the action
//! ran. Its time is the store's line. Then:
//!
//! - **an erase** lets the key run again, with any body: a re-run is excused when the
//!   erase landed after the earlier claim was won, the first claim after the erase
//!   inserted a fresh record, and the chain from there to the re-run holds ([`erased`]);
//!   it frees the key once, for the first claim of the scope after it;
//! - **a resolve as failed** lets the key run again with the same request: a re-run is
//!   excused when the resolve landed after the earlier claim was won and before any later
//!   claim, the first claim after it took the failed record over, and the chain from there
//!   holds ([`resolved_failed`]);
//! - each shown change starts a new *segment* of the key's answers: answers are judged
//!   divergent within a segment only, and only the last segment's answers must replay
//!   after the run. A replay is allowed to be the old record's only when its request
//!   started before the change landed, or within the edge cache's staleness bound after it
//!   (`edge_cache.max_staleness_ms`, `docs/stream-machine.md#the-edge-cache`) through an
//!   Envoy whose edge held that answer (a caller got it through that Envoy before the
//!   change); otherwise a replay of an answer an earlier segment delivered is stale, and
//!   after a resolve as completed every replay must be the resolved answer — and a `409
//!   operation_unknown` is a record that no longer answers as it must ([`across`]).

use std::collections::BTreeSet;

use super::evidence::{ClaimWon, TAKEOVER};
use super::rerun::chain_holds;
use super::verdict::{Row, SETTLE_LOG_SLACK_MS};
use crate::history::{Attempt, FaultKind, History, Ms, Outcome};

/// What an operator did to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Deleted it.
    Erase,
    /// Settled an `unknown` record as completed.
    ResolveCompleted,
    /// Settled an `unknown` record as failed: the operation did not happen.
    ResolveFailed,
}

impl Action {
    /// The action a fault of `kind` makes.
    fn of(kind: FaultKind) -> Option<Action> {
        match kind {
            FaultKind::OperatorErase => Some(Action::Erase),
            FaultKind::OperatorResolve => Some(Action::ResolveCompleted),
            FaultKind::OperatorResolveFailed => Some(Action::ResolveFailed),
            _ => None,
        }
    }

    /// Its spelling in the store's evidence line (`lease-store/src/evidence.rs`).
    fn logged_as(self) -> &'static str {
        match self {
            Action::Erase => "erase",
            Action::ResolveCompleted => "resolve_completed",
            Action::ResolveFailed => "resolve_failed",
        }
    }

    /// Whether the key may run again after it: an erase, or a resolve as failed.
    pub fn frees_the_key(self) -> bool {
        matches!(self, Action::Erase | Action::ResolveFailed)
    }
}

/// A shown operator change of one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The action (fault id).
    pub fault: usize,
    /// When the store logged it committed.
    pub landed_ms: Ms,
    /// What was done.
    pub action: Action,
    /// A resolve's recorded answer.
    pub resolved: Option<(u16, String)>,
}

/// The shown changes of `scope`, by the time they landed.
pub fn shown(history: &History, scope: &str) -> Vec<Change> {
    let mut changes: Vec<Change> = history
        .faults
        .iter()
        .filter_map(|fault| {
            let made = fault.operator.as_ref()?;
            let action = Action::of(fault.kind)?;
            if !made.done() || made.scope.as_deref() != Some(scope) {
                return None;
            }
            let landed = history.evidence.operator_changes.iter().find(|change| {
                change.scope == scope
                    && change.action == action.logged_as()
                    && fault.start_ms - SETTLE_LOG_SLACK_MS <= change.at_ms
                    && change.at_ms <= fault.end_ms + SETTLE_LOG_SLACK_MS
            })?;
            Some(Change {
                fault: fault.id,
                landed_ms: landed.at_ms,
                action,
                resolved: made.resolved.clone(),
            })
        })
        .collect();
    changes.sort_by_key(|change| change.landed_ms);
    changes
}

/// The first shown change `action` of the scope of `first` that landed after that claim
/// and no later than the last of `between` (give or take a settle line's slack).
fn landed_before_the_last(
    action: Action,
    first: &ClaimWon,
    between: &[&ClaimWon],
    history: &History,
) -> Option<Change> {
    let last = between.last()?;
    shown(history, &first.scope).into_iter().find(|change| {
        change.action == action
            && first.at_ms < change.landed_ms
            && change.landed_ms <= last.at_ms + SETTLE_LOG_SLACK_MS
    })
}

/// The erase row: `Ok(None)` when no shown erase of the scope landed after the earlier
/// claim `first` and before a claim of `between` (up to the re-run's, the last); `Err` when
/// one did but the claims after it are not a fresh insert and a chain that holds.
pub fn erased<'a>(
    first: &ClaimWon,
    between: &[&'a ClaimWon],
    history: &History,
) -> Result<Option<(Row, &'a ClaimWon)>, String> {
    let Some(erase) = landed_before_the_last(Action::Erase, first, between, history) else {
        return Ok(None);
    };
    // The erase explains the claims after it. A claim logged before the erase's line that
    // won any way but a fresh insert came before the erase (the erase deleted the record
    // it won): the erase explains nothing up to it, and that claim is for the other rows.
    // Nor did the scope's first claim come after it, however close its line: the erase
    // deleted a record, which a claim of the scope had made.
    let scopes_first = history
        .evidence
        .claims
        .iter()
        .filter(|claim| claim.scope == first.scope)
        .map(|claim| claim.fence)
        .min();
    let after_the_erase = |claim: &ClaimWon| {
        claim.at_ms >= erase.landed_ms
            || (claim.at_ms >= erase.landed_ms - SETTLE_LOG_SLACK_MS
                && claim.how == "claimed"
                && Some(claim.fence) != scopes_first)
    };
    let Some(from) = between.iter().position(|claim| after_the_erase(claim)) else {
        return Ok(None);
    };
    let successor = between[from];
    if successor.how != "claimed" {
        return Err(format!(
            "fence {} won by `{}` after the erase at {} ms, not by a fresh insert",
            successor.fence, successor.how, erase.landed_ms
        ));
    }
    // An erase frees the key once: for the first claim of the scope after it. When that was
    // an earlier claim, the erase explains nothing here, and the re-run needs another row
    // (the earlier run's forgotten answer, say), which the caller goes on to look for.
    let freed_earlier = history.evidence.claims.iter().any(|claim| {
        claim.scope == first.scope && claim.fence < successor.fence && after_the_erase(claim)
    });
    if freed_earlier {
        return Ok(None);
    }
    chain_holds(&between[from..], history)?;
    Ok(Some((
        Row::OperatorErased { fault: erase.fault },
        successor,
    )))
}

/// The resolve-as-failed row: `Ok(None)` when no shown resolve as failed of the scope
/// landed after the earlier claim `first` and by the re-run's claim (the last of
/// `between`); `Err` when one did but a claim came before it (a record the operator found
/// `unknown` had no later claim), or the first claim after it did not take the failed
/// record over, or the chain from there does not hold. The resolve keeps the record's
/// fingerprint, so the re-run's body is checked as for any other row.
pub fn resolved_failed<'a>(
    first: &ClaimWon,
    between: &[&'a ClaimWon],
    history: &History,
) -> Result<Option<(Row, &'a ClaimWon)>, String> {
    let Some(resolve) = landed_before_the_last(Action::ResolveFailed, first, between, history)
    else {
        return Ok(None);
    };
    let successor = between[0];
    if successor.at_ms + SETTLE_LOG_SLACK_MS < resolve.landed_ms {
        return Err(format!(
            "fence {} was won at {} ms, before the resolve as failed landed at {} ms",
            successor.fence, successor.at_ms, resolve.landed_ms
        ));
    }
    if successor.how != TAKEOVER {
        return Err(format!(
            "fence {} won by `{}` after the resolve as failed at {} ms, not by taking the \
             failed record over",
            successor.fence, successor.how, resolve.landed_ms
        ));
    }
    chain_holds(between, history)?;
    Ok(Some((
        Row::OperatorResolvedFailed {
            fault: resolve.fault,
        },
        successor,
    )))
}

/// A successful answer a caller of the key got.
pub struct Answered<'a> {
    /// The attempt.
    pub attempt: &'a Attempt,
    /// Its status and body.
    pub answer: (u16, String),
    /// For a fresh answer: when the claim of the execution that produced it was won.
    pub claimed_ms: Option<Ms>,
}

/// A key's answers judged across its shown changes.
#[derive(Debug, Default)]
pub struct Across {
    /// Distinct successful answers of one segment beyond the first, and stale replays.
    pub divergent: BTreeSet<(u16, String)>,
    /// The answers the record must still replay after the run.
    pub last: BTreeSet<(u16, String)>,
    /// When a caller of the last segment first saw the record `unknown`.
    pub unknown_since: Option<Ms>,
    /// `operation_unknown` answers to requests that started past the staleness bound
    /// after a resolve, with the answer they should have been.
    pub unknown_after_resolve: Vec<(usize, (u16, String), Outcome)>,
}

/// Whether a request that started at `start` must have seen a change that landed at
/// `landed`: an edge may serve the record as it was for `staleness_ms` after a change.
pub fn must_have_seen(landed: Ms, start: Ms, staleness_ms: Ms) -> bool {
    landed.saturating_add(staleness_ms) < start
}

/// Whether a request that started at `start` and was replayed `answer` through Envoy
/// `envoy` must have seen a change that landed at `landed`: past the staleness bound, or
/// landed before it started while that Envoy's edge held no entry of `answer` — no caller
/// of the key (`attempts`) got that very answer through it by the change. The staleness
/// allowance is the edge's that cached the record as it was; any other reads the store.
pub fn replay_must_have_seen(
    landed: Ms,
    (envoy, start): (usize, Ms),
    answer: (u16, &str),
    attempts: &[&Attempt],
    staleness_ms: Ms,
) -> bool {
    let cached = attempts.iter().any(|other| {
        other.envoy == envoy
            && other.end_ms <= landed
            && matches!(
                &other.outcome,
                Outcome::Answered { status, body, problem_code: None, .. }
                    if *status == answer.0 && body == answer.1
            )
    });
    must_have_seen(landed, start, staleness_ms) || (landed < start && !cached)
}

/// Judges the successful `answers` and the `unknowns` (`operation_unknown` attempts) of
/// one key across its shown `changes`. A fresh answer belongs to the segment its claim was
/// won in; a replay to any segment from the last change its request must have seen
/// ([`replay_must_have_seen`] among the key's `attempts`) to the last that landed before
/// it ended.
pub fn across(
    changes: &[Change],
    answers: &[Answered<'_>],
    (unknowns, attempts): (&[&Attempt], &[&Attempt]),
    staleness_ms: Ms,
) -> Across {
    let landed_by = |at: Ms| changes.iter().filter(|c| c.landed_ms <= at).count();
    let seen_by = |start: Ms| {
        changes
            .iter()
            .filter(|c| must_have_seen(c.landed_ms, start, staleness_ms))
            .count()
    };
    let mut sets: Vec<BTreeSet<(u16, String)>> = vec![BTreeSet::new(); changes.len() + 1];
    for (k, change) in changes.iter().enumerate() {
        sets[k + 1].extend(change.resolved.clone());
    }
    // What each segment's own runs (or its resolve) answered: a replay of one of these is
    // that segment's, even when an earlier segment answered the same (an upstream that
    // answers a re-run with its first run's answer).
    let mut fresh = sets.clone();
    let mut across = Across::default();
    let mut spanning = Vec::new();
    let mut replays = Vec::new();
    for answered in answers {
        let (attempt, answer) = (answered.attempt, &answered.answer);
        let replayed = matches!(attempt.outcome, Outcome::Answered { replayed: true, .. });
        let (lo, hi) = match (replayed, answered.claimed_ms) {
            (false, Some(claimed)) => (landed_by(claimed), landed_by(claimed)),
            (false, None) => (landed_by(attempt.start_ms), landed_by(attempt.end_ms)),
            (true, _) => {
                let seen = |change: &Change| {
                    let answer = (answer.0, answer.1.as_str());
                    let replay = (attempt.envoy, attempt.start_ms);
                    replay_must_have_seen(change.landed_ms, replay, answer, attempts, staleness_ms)
                };
                let lo = changes.iter().rposition(seen).map_or(0, |k| k + 1);
                (lo, landed_by(attempt.end_ms))
            }
        };
        if lo < hi {
            spanning.push((lo, hi, answer));
            continue;
        }
        if replayed {
            replays.push((lo, answer));
        } else {
            fresh[lo].insert(answer.clone());
        }
        sets[lo].insert(answer.clone());
    }
    // A replay of an answer an earlier segment delivered, past the bound, and no run of its
    // own segment answered: stale.
    for (k, answer) in replays {
        if !fresh[k].contains(answer) && sets[..k].iter().any(|earlier| earlier.contains(answer)) {
            across.divergent.insert(answer.clone());
        }
    }
    // An answer that may belong to more than one segment must be one of theirs.
    for (lo, hi, answer) in spanning {
        if !sets[lo..=hi].iter().any(|set| set.contains(answer)) {
            let at = (lo..=hi).rev().find(|k| !sets[*k].is_empty()).unwrap_or(lo);
            sets[at].insert(answer.clone());
        }
    }
    for set in &sets {
        if set.len() > 1 {
            across.divergent.extend(set.iter().cloned());
        }
    }
    let last = changes.len();
    across.last = sets[last].clone();
    let resolved = changes.last().and_then(|change| change.resolved.clone());
    for attempt in unknowns {
        if seen_by(attempt.start_ms) < last {
            continue;
        }
        match &resolved {
            Some(answer) => across.unknown_after_resolve.push((
                attempt.envoy,
                answer.clone(),
                attempt.outcome.clone(),
            )),
            None => {
                across.unknown_since = Some(
                    across
                        .unknown_since
                        .map_or(attempt.end_ms, |since| since.min(attempt.end_ms)),
                );
            }
        }
    }
    across
}
