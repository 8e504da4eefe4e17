//! The facts the judge reasons from, read from the processes' own logs: which claim won
//! each scope with which fence and *how* (the lease-store's `claim_won` lines), which
//! renews extended a lease (its `renewed` lines), which settle calls the store applied or
//! refused (its `settle` lines), and what each Envoy's
//! filter did with its claims' settle calls — handed off to the outbox, landed (by the
//! stream or the outbox), given up, lease lost (its `evidence=` lines). The formats are
//! the components' own (`lease-store/src/evidence.rs`, `filter/src/log.rs`); this file
//! only parses them and puts each fact on the run's clock.
//!
//! Every value that names a way of winning or settling is kept as the string logged: the
//! set is open (a new claim outcome may appear), and the judge excuses only the values it
//! knows ([`TAKEOVER`]), so an unknown one can never pass by accident.
//!
//! This file holds the facts and the questions the judge asks of them; `read.rs` parses
//! the logs, `clock.rs` puts their timestamps on the run's clock.

mod clock;
mod read;

use serde::{Deserialize, Serialize};

use crate::history::Ms;

/// The `how` of a claim that took over an expired lease with the same fingerprint: the
/// only way a second execution may win (`docs/guarantee.md#where-it-is-at-least-once`).
pub const TAKEOVER: &str = "recovered_abandoned";

/// A claim the lease-store committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimWon {
    /// When the store logged it (after the commit).
    pub at_ms: Ms,
    /// Which lease-store replica.
    pub store: usize,
    /// The scope digest.
    pub scope: String,
    /// The fingerprint digest.
    pub fingerprint: String,
    /// The claim id (fences the settle calls).
    pub claim_id: String,
    /// The fence (unique per claim).
    pub fence: u64,
    /// How it was won: `claimed` (a fresh insert), `recovered_abandoned`,
    /// `recovered_ttl`, or a value this judge does not know.
    pub how: String,
    /// Claimed under a hold or record policy (`at_most_once=true`): its lapsed lease may
    /// never be taken over. A store that predates the field logs none: `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_most_once: bool,
}

/// A renew that extended a claim's lease (the lease-store's `renewed` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    /// When the store logged it (after the commit).
    pub at_ms: Ms,
    /// Which lease-store replica.
    pub store: usize,
    /// The claim whose lease it extended.
    pub claim_id: String,
}

/// A settle call the lease-store answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSettle {
    /// When the store logged it.
    pub at_ms: Ms,
    /// Which lease-store replica.
    pub store: usize,
    /// The scope digest.
    pub scope: String,
    /// The claim it settles.
    pub claim_id: String,
    /// `finalize`, `finalize_not_replayable`, `release_cooldown`, `release_unknown`,
    /// `release_forget`.
    pub call: String,
    /// `applied`, `lease_lost` or `refused`.
    pub outcome: String,
    /// A release that only recognised its own earlier landing (`repeat=true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeat: bool,
    /// A release: when the database applied it, on the run's clock — the database's own
    /// stamp, which a store frozen between its commit and this line cannot delay. A store
    /// that predates the field, or a forget's repeat, logs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at_ms: Option<Ms>,
    /// A release as cooldown: when the database ends the cooldown, on the run's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_ends_at_ms: Option<Ms>,
    /// An orphan's release: what it left of the record, `failed` (a takeover given back)
    /// or `no_record` (`docs/records.md#orphan-claims`). A store that predates the
    /// give-back logs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaves: Option<String>,
}

impl StoreSettle {
    /// Whether the record was settled by it.
    pub fn applied(&self) -> bool {
        self.outcome == "applied"
    }
}

/// When a claim's release freed its record, from the store's settle lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `release_forget` or `release_cooldown`.
    pub call: String,
    /// When a store first logged it applied.
    pub logged_ms: Ms,
    /// When the database applied it and ended its cooldown, on its own clock
    /// ([`DbStamps`]), when a line carries them.
    pub stamps: Option<DbStamps>,
    /// What an orphan's release left of the record ([`StoreSettle::leaves`]).
    pub leaves: Option<String>,
}

/// A release's database stamps, on the run's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbStamps {
    /// When the release was applied (before its commit).
    pub applied_ms: Ms,
    /// When the cooldown ends (a release as cooldown).
    pub cooldown_ends_ms: Option<Ms>,
}

/// How far a database stamp and a log line's time may disagree from rounding to whole
/// milliseconds alone (both are truncated).
pub const STAMP_ROUNDING_MS: Ms = 1;

/// An operator change a lease-store committed (its `operator` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorChange {
    /// When the store logged it (after the commit).
    pub at_ms: Ms,
    /// Which lease-store replica.
    pub store: usize,
    /// The scope digest.
    pub scope: String,
    /// `erase`, `resolve_completed` or `resolve_failed` (the audit's names).
    pub action: String,
}

/// A lapsed at-most-once lease a lease-store made `unknown` instead of taking it over (its
/// `lapse_held` line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LapseHeld {
    /// When the store logged it (after the commit).
    pub at_ms: Ms,
    /// Which lease-store replica.
    pub store: usize,
    /// The scope digest.
    pub scope: String,
    /// The fence of the claim whose lease lapsed.
    pub fence: u64,
}

/// What an Envoy's filter logged about one claim's settle call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxySettle {
    /// When Envoy logged it.
    pub at_ms: Ms,
    /// Which Envoy (its log continues across restarts).
    pub envoy: usize,
    /// `handoff`, `settle_landed`, `given_up`, `lease_lost`.
    pub event: String,
    /// The scope digest.
    pub scope: String,
    /// The claim's fence.
    pub fence: u64,
    /// The settle call (as the store's lines name it).
    pub call: String,
    /// `stream` or `outbox`.
    pub by: String,
    /// The restart epoch of the Envoy process that logged it: a hot-restarted child marks
    /// its lines `epoch=N` (`testkit/src/stack/parts.rs`), so a line without is epoch 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u32,
}

fn is_zero(epoch: &u32) -> bool {
    *epoch == 0
}

/// Every fact read from the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Won claims, from the lease-stores.
    pub claims: Vec<ClaimWon>,
    /// Renews that extended a lease, from the lease-stores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub renewals: Vec<Renewed>,
    /// Settle calls the lease-stores answered.
    pub store_settles: Vec<StoreSettle>,
    /// Settle facts the Envoys logged.
    pub proxy_settles: Vec<ProxySettle>,
    /// Operator changes the lease-stores committed.
    #[serde(default)]
    pub operator_changes: Vec<OperatorChange>,
    /// Lapsed at-most-once leases the lease-stores held as `unknown`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lapses_held: Vec<LapseHeld>,
}

impl Evidence {
    /// When a store first held the lapsed lease of the claim with `fence`, if one did.
    pub fn lapse_held(&self, fence: u64) -> Option<&LapseHeld> {
        self.lapses_held
            .iter()
            .filter(|held| held.fence == fence)
            .min_by_key(|held| held.at_ms)
    }

    /// When the lease of `claim` was last extended at or before `by`: its last logged renew
    /// then, or the claim itself.
    pub fn lease_last_extended(&self, claim: &ClaimWon, by: Ms) -> Ms {
        self.renewals
            .iter()
            .filter(|renewed| renewed.claim_id == claim.claim_id && renewed.at_ms <= by)
            .map(|renewed| renewed.at_ms)
            .fold(claim.at_ms, Ms::max)
    }

    /// The won claim with `fence`.
    pub fn claim(&self, fence: u64) -> Option<&ClaimWon> {
        self.claims.iter().find(|claim| claim.fence == fence)
    }

    /// The claims won in `scope` with a fence in `(after, up_to]`, by fence.
    pub fn claims_between(&self, scope: &str, after: u64, up_to: u64) -> Vec<&ClaimWon> {
        let mut claims: Vec<&ClaimWon> = self
            .claims
            .iter()
            .filter(|claim| claim.scope == scope && after < claim.fence && claim.fence <= up_to)
            .collect();
        claims.sort_by_key(|claim| claim.fence);
        claims
    }

    /// When a settle call of `claim` first landed: applied by a store, or reported landed
    /// by a proxy; `None` when none did.
    pub fn first_landed(&self, claim: &ClaimWon) -> Option<Ms> {
        let by_store = self
            .store_settles
            .iter()
            .filter(|settle| settle.claim_id == claim.claim_id && settle.applied())
            .map(|settle| settle.at_ms);
        let by_proxy = self
            .proxy_settles
            .iter()
            .filter(|settle| settle.fence == claim.fence && settle.event == "settle_landed")
            .map(|settle| settle.at_ms);
        by_store.chain(by_proxy).min()
    }

    /// The release (one of `calls`) a store applied to `claim`, if one did: when it was
    /// first logged, and the database's stamps from any of its lines (the first landing's
    /// or a repeat's: both read the same record). `Err` when the stamps contradict the
    /// log: applied after a line that reported it, or two lines that disagree.
    pub fn release(&self, claim: &ClaimWon, calls: &[&str]) -> Result<Option<Release>, String> {
        let lines: Vec<&StoreSettle> = self
            .store_settles
            .iter()
            .filter(|settle| settle.claim_id == claim.claim_id && settle.applied())
            .filter(|settle| calls.contains(&settle.call.as_str()))
            .collect();
        let Some(first) = lines.iter().min_by_key(|settle| settle.at_ms) else {
            return Ok(None);
        };
        let mut stamps = lines.iter().filter_map(|settle| {
            Some(DbStamps {
                applied_ms: settle.applied_at_ms?,
                cooldown_ends_ms: settle.cooldown_ends_at_ms,
            })
        });
        let stamp = stamps.next();
        if let Some(stamp) = stamp {
            if stamps.any(|other| other != stamp) {
                return Err(format!(
                    "the stores' lines of fence {}'s release disagree on when it was applied",
                    claim.fence
                ));
            }
            if stamp.applied_ms > first.at_ms + STAMP_ROUNDING_MS {
                return Err(format!(
                    "fence {}'s release is stamped applied at {} ms, after a store logged it \
                     at {} ms",
                    claim.fence, stamp.applied_ms, first.at_ms
                ));
            }
        }
        Ok(Some(Release {
            call: first.call.clone(),
            logged_ms: first.at_ms,
            stamps: stamp,
            leaves: first.leaves.clone(),
        }))
    }

    /// When a store applied the `release_forget` of a claim a proxy logged it did not
    /// forward (`evidence=not_forwarded`, a `won` answered too late to keep its lease:
    /// `docs/stream-machine.md#the-claim`), or released the claim as an orphan
    /// (`release_orphan`: its answer never reached the proxy, so no proxy could forward it,
    /// `docs/records.md#orphan-claims`); `Err` names the missing line. Whether the upstream
    /// ran the fence anyway is for the judge to check against its log.
    pub fn released_unforwarded(&self, claim: &ClaimWon) -> Result<Release, String> {
        if let Some(orphan) = self.release(claim, &["release_orphan"])? {
            return Ok(orphan);
        }
        let fence = claim.fence;
        if !self.proxy_settles.iter().any(|settle| {
            settle.event == "not_forwarded" && settle.fence == fence && settle.scope == claim.scope
        }) {
            return Err("no proxy logged it not forwarded".to_owned());
        }
        self.release(claim, &["release_forget"])?
            .ok_or_else(|| "no store applied its release_forget".to_owned())
    }

    /// The first `event` Envoy `envoy` logged for `fence`.
    pub fn proxy_event(&self, envoy: usize, fence: u64, event: &str) -> Option<&ProxySettle> {
        self.proxy_settles
            .iter()
            .filter(|s| s.envoy == envoy && s.fence == fence && s.event == event)
            .min_by_key(|s| s.at_ms)
    }
}

#[cfg(test)]
mod tests;
