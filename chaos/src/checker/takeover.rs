//! What every row that excuses the takeover of a lapsed lease needs besides its own event
//! (`docs/guarantee.md#where-it-is-at-least-once`), shown from evidence the system under
//! test cannot fake — the run's plan, the stores' lines, what callers were answered —
//! never from what a component says about itself:
//!
//! - the key's policy is the plan's: under `uncertain: hold` or `reconcile` no lapsed
//!   lease is taken over, whatever the claims' `at_most_once` flags say ([`at_most_once_takeover`]);
//! - no caller of the key was replayed the record before the takeover: a replay is the
//!   store's completed record, so the earlier claim's settle had landed
//!   ([`replayed_before`]);
//! - the lease had run out from its last logged renew, not only from the claim
//!   ([`lease_ran_out`]);
//! - an outbox's give-up came no earlier than the policy's `record_retry_budget_ms` after
//!   its hand-off ([`gave_up_after_its_budget`]). A full outbox gives up sooner, but
//!   nothing outside the proxy shows one: such a give-up is excused by no row.

use std::collections::HashMap;

use keyflight_filter::config::Uncertain;

use super::evidence::{ClaimWon, ProxySettle, STAMP_ROUNDING_MS, TAKEOVER};
use super::operator;
use super::partition::RENEW_LOG_SLACK_MS;
use crate::history::{Attempt, Execution, History, Ms, Outcome};

/// A hold policy is at-most-once (`docs/guarantee.md#at-most-once-and-at-least-once-policies`):
/// no row excuses a takeover in the chain from `first` through `between` of a key the plan
/// guards with `uncertain: hold` (`PolicyFacts::held_at_most_once`), nor of a lapsed lease
/// a store logged claimed at-most-once, nor by a claim logged so — its policy holds the
/// lapse of its own fingerprint whoever claimed it (`docs/records.md#a-lapsed-at-most-once-lease`),
/// whatever befell the lost claim's proxy. The flags can only refuse: a claim logged
/// without one is held to the plan. A claim released unrun and then claimed afresh was not
/// taken over.
pub fn at_most_once_takeover(
    earlier: &Execution,
    first: &ClaimWon,
    between: &[&ClaimWon],
    history: &History,
) -> Result<(), String> {
    let held = history.policy.held_at_most_once(&earlier.path);
    let chain: Vec<&ClaimWon> = std::iter::once(first)
        .chain(between.iter().copied())
        .collect();
    for pair in chain.windows(2) {
        let [taken, taker] = pair else { continue };
        if taker.how != TAKEOVER {
            continue;
        }
        if held {
            let path = earlier.path.split('?').next().unwrap_or_default();
            return Err(format!(
                "the plan guards `{path}` with `uncertain: {}`, yet fence {} took fence {}'s \
                 lapsed lease over: a lapsed at-most-once lease must become `unknown`",
                setting_name(history.policy.uncertain(&earlier.path)),
                taker.fence,
                taken.fence
            ));
        }
        if taken.at_most_once {
            return Err(format!(
                "fence {} was claimed at-most-once (`uncertain: hold` or `record`), yet fence \
                 {} took its lease over: a lapsed at-most-once lease must become `unknown`",
                taken.fence, taker.fence
            ));
        }
        if taker.at_most_once {
            return Err(format!(
                "fence {} was claimed at-most-once (`uncertain: hold` or `record`), yet it took \
                 fence {}'s lapsed lease over: a retry of a hold policy holds a lapse of its \
                 own fingerprint `unknown`, whoever claimed it",
                taker.fence, taken.fence
            ));
        }
    }
    Ok(())
}

/// `uncertain`'s name in a plugin configuration.
pub fn setting_name(uncertain: Uncertain) -> &'static str {
    match uncertain {
        Uncertain::Hold => "hold",
        Uncertain::Retry => "retry",
        Uncertain::Record => "record",
        Uncertain::Reconcile => "reconcile",
    }
}

/// When a caller of `earlier`'s key was first replayed a recorded answer in a request that
/// ended after `first` was won and before `until` (the takeover, or a store's hold of the
/// lapse): the record was completed by then, so no lease was left to lapse. A request an
/// edge may have served the record as it was before an operator change (one that landed
/// within `edge_cache.max_staleness_ms` before it started, or while it ran) proves nothing.
pub fn replayed_before(
    earlier: &Execution,
    first: &ClaimWon,
    until: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Option<Ms> {
    let key = earlier.key.as_deref()?;
    let changes = operator::shown(history, &first.scope);
    let staleness = Ms::try_from(history.policy.edge_max_staleness_ms).unwrap_or(Ms::MAX);
    attempts_by_id
        .values()
        .filter(|attempt| attempt.key == key)
        .filter(|attempt| {
            matches!(
                attempt.outcome,
                Outcome::Answered {
                    replayed: true,
                    problem_code: None,
                    ..
                }
            )
        })
        .filter(|attempt| first.at_ms < attempt.end_ms && attempt.end_ms < until.at_ms)
        .filter(|attempt| {
            changes.iter().all(|change| {
                change.landed_ms > attempt.end_ms
                    || operator::must_have_seen(change.landed_ms, attempt.start_ms, staleness)
            })
        })
        .map(|attempt| attempt.end_ms)
        .min()
}

/// That `first`'s lease had run out when `until` took it over (or a store held its lapse):
/// no sooner than the history's `lease_ms` after it was last extended — by its last renew
/// a store logged before, or by the claim — give or take a store's log line after its
/// commit. A history that does not record the lease is not timed.
pub fn lease_ran_out(first: &ClaimWon, until: &ClaimWon, history: &History) -> Result<(), String> {
    let Some(lease_ms) = history.lease_ms else {
        return Ok(());
    };
    let lease = Ms::try_from(lease_ms).unwrap_or(Ms::MAX);
    let extended = history.evidence.lease_last_extended(first, until.at_ms);
    if until.at_ms + RENEW_LOG_SLACK_MS < extended.saturating_add(lease) {
        return Err(format!(
            "fence {} took the lease over at {} ms, but fence {}'s lease was last extended at \
             {extended} ms for {lease_ms} ms: it had not run out",
            until.fence, until.at_ms, first.fence
        ));
    }
    Ok(())
}

/// That the outbox gave `given_up`'s claim up only after handing it off and trying for the
/// policy's whole `record_retry_budget_ms` (`filter/README.md#lease-renewal-and-the-record-outbox-f4-f14`).
pub fn gave_up_after_its_budget(given_up: &ProxySettle, history: &History) -> Result<(), String> {
    let (envoy, fence) = (given_up.envoy, given_up.fence);
    let Some(handoff) = history.evidence.proxy_event(envoy, fence, "handoff") else {
        return Err(format!(
            "envoy-{envoy} logged giving fence {fence} up at {} ms, but no hand-off of it to \
             its outbox",
            given_up.at_ms
        ));
    };
    let budget = history.policy.record_retry_budget_ms;
    let ran_out = handoff
        .at_ms
        .saturating_add(Ms::try_from(budget).unwrap_or(Ms::MAX));
    if given_up.at_ms + STAMP_ROUNDING_MS < ran_out {
        return Err(format!(
            "envoy-{envoy} gave fence {fence} up at {} ms, {} ms after its hand-off at {} ms: \
             before its record_retry_budget_ms ({budget} ms) ran out",
            given_up.at_ms,
            given_up.at_ms - handoff.at_ms,
            handoff.at_ms
        ));
    }
    Ok(())
}
