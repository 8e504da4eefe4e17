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

use std::collections::BTreeMap;

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
    /// The facts in the logs: `stores[i]` and `envoys[i]` are replica `i`'s log text;
    /// `run_start_unix_ms` puts their wall-clock times on the run's clock.
    pub fn read(stores: &[String], envoys: &[String], run_start_unix_ms: u64) -> Evidence {
        let mut evidence = Evidence::default();
        for (store, log) in stores.iter().enumerate() {
            for line in log.lines() {
                evidence.read_store_line(store, line, run_start_unix_ms);
            }
        }
        for (envoy, log) in envoys.iter().enumerate() {
            evidence
                .proxy_settles
                .extend(log.lines().filter_map(|line| {
                    proxy_settle(envoy, line, run_start_unix_ms)
                        .or_else(|| previous_release_handoff(envoy, line, run_start_unix_ms))
                }));
        }
        evidence
    }

    fn read_store_line(&mut self, store: usize, line: &str, run_start_unix_ms: u64) {
        #[derive(Deserialize)]
        struct Line {
            timestamp: String,
            target: String,
            fields: BTreeMap<String, serde_json::Value>,
        }
        let Ok(line) = serde_json::from_str::<Line>(line) else {
            return;
        };
        if line.target != "keyflight_lease_store::evidence" {
            return;
        }
        let Some(at_ms) =
            rfc3339_unix_ms(&line.timestamp).map(|t| on_run_clock(t, run_start_unix_ms))
        else {
            return;
        };
        let text = |name: &str| {
            line.fields
                .get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let fence = line.fields.get("fence").and_then(serde_json::Value::as_u64);
        match text("evidence").as_deref() {
            Some("claim_won") => {
                if let (Some(scope), Some(fingerprint), Some(claim_id), Some(fence), Some(how)) = (
                    text("scope"),
                    text("fingerprint"),
                    text("claim_id"),
                    fence,
                    text("how"),
                ) {
                    self.claims.push(ClaimWon {
                        at_ms,
                        store,
                        scope,
                        fingerprint,
                        claim_id,
                        fence,
                        how,
                        at_most_once: line
                            .fields
                            .get("at_most_once")
                            .and_then(serde_json::Value::as_bool)
                            .unwrap_or(false),
                    });
                }
            }
            Some("settle") => {
                if let (Some(scope), Some(claim_id), Some(call), Some(outcome)) = (
                    text("scope"),
                    text("claim_id"),
                    text("call"),
                    text("outcome"),
                ) {
                    let run_ms = |name: &str| {
                        let unix_ms = line.fields.get(name).and_then(serde_json::Value::as_u64)?;
                        Some(on_run_clock(
                            i64::try_from(unix_ms).ok()?,
                            run_start_unix_ms,
                        ))
                    };
                    self.store_settles.push(StoreSettle {
                        at_ms,
                        store,
                        scope,
                        claim_id,
                        call,
                        outcome,
                        repeat: line
                            .fields
                            .get("repeat")
                            .and_then(serde_json::Value::as_bool)
                            .unwrap_or(false),
                        applied_at_ms: run_ms("released_at_unix_ms"),
                        cooldown_ends_at_ms: run_ms("cooldown_ends_at_unix_ms"),
                        leaves: text("leaves"),
                    });
                }
            }
            Some("renewed") => {
                if let Some(claim_id) = text("claim_id") {
                    self.renewals.push(Renewed {
                        at_ms,
                        store,
                        claim_id,
                    });
                }
            }
            Some("lapse_held") => {
                if let (Some(scope), Some(fence)) = (text("scope"), fence) {
                    self.lapses_held.push(LapseHeld {
                        at_ms,
                        store,
                        scope,
                        fence,
                    });
                }
            }
            Some("operator") => {
                if let (Some(scope), Some(action)) = (text("scope"), text("action")) {
                    self.operator_changes.push(OperatorChange {
                        at_ms,
                        store,
                        scope,
                        action,
                    });
                }
            }
            _ => {}
        }
    }

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

/// One `evidence=` line of Envoy `envoy`'s log: `[date time.ms][thread][level][logger]
/// … [epoch=E ]… evidence=EVENT scope=… fence=N call=… by=… | note`.
fn proxy_settle(envoy: usize, line: &str, run_start_unix_ms: u64) -> Option<ProxySettle> {
    let (prefix, fields) = line.split_once("evidence=")?;
    let epoch = prefix
        .split_once("] epoch=")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let (fields, _) = fields.split_once(" | ").unwrap_or((fields, ""));
    let mut tokens = fields.split_whitespace();
    let event = tokens.next()?.to_owned();
    let fields: BTreeMap<&str, &str> = tokens.filter_map(|t| t.split_once('=')).collect();
    Some(ProxySettle {
        at_ms: envoy_line_ms(line, run_start_unix_ms)?,
        envoy,
        event,
        scope: (*fields.get("scope")?).to_owned(),
        fence: fields.get("fence")?.parse().ok()?,
        call: (*fields.get("call")?).to_owned(),
        by: (*fields.get("by")?).to_owned(),
        epoch,
    })
}

/// What the previous release (`testkit/src/previous_release.rs`), which a rolling upgrade
/// may have put on an Envoy, logs where this one logs `evidence=handoff`: a settle call
/// that failed, handed to the outbox as the response goes out. That release logs no other
/// hand-off, and logs this line with the hand-off itself (its `filter/src/machine/
/// settle.rs`): `[date time.ms][thread][warning][wasm] … keyflight: scope HEX fence N:
/// CALL failed: ERROR; delivering the response, the outbox keeps the lease and retries`.
/// `CALL` is that release's name of the call (`finalize`, `release`).
fn previous_release_handoff(
    envoy: usize,
    line: &str,
    run_start_unix_ms: u64,
) -> Option<ProxySettle> {
    const HANDED_OFF: &str = "; delivering the response, the outbox keeps the lease and retries";
    let (_, said) = line
        .strip_suffix(HANDED_OFF)?
        .split_once("keyflight: scope ")?;
    let (scope, rest) = said.split_once(" fence ")?;
    let (fence, rest) = rest.split_once(": ")?;
    let (call, _) = rest.split_once(" failed: ")?;
    Some(ProxySettle {
        at_ms: envoy_line_ms(line, run_start_unix_ms)?,
        envoy,
        event: "handoff".to_owned(),
        scope: scope.to_owned(),
        fence: fence.parse().ok()?,
        call: call.to_owned(),
        by: "stream".to_owned(),
        epoch: 0,
    })
}

/// When Envoy logged `line` (`[date time.ms]…`, in UTC: the run starts Envoy with
/// `TZ=UTC`), on the run's clock.
fn envoy_line_ms(line: &str, run_start_unix_ms: u64) -> Option<Ms> {
    let stamp = line.strip_prefix('[')?.get(..23)?;
    let (date, time) = stamp.split_once(' ')?;
    Some(on_run_clock(unix_ms(date, time)?, run_start_unix_ms))
}

fn on_run_clock(unix_ms: i64, run_start_unix_ms: u64) -> Ms {
    unix_ms - i64::try_from(run_start_unix_ms).unwrap_or(i64::MAX)
}

/// `2026-12-01T16:36:44.123456Z` → Unix milliseconds (UTC only, as the store logs).
fn rfc3339_unix_ms(stamp: &str) -> Option<i64> {
    let stamp = stamp.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    unix_ms(date, time)
}

/// `YYYY-MM-DD` and `HH:MM:SS[.fraction]`, UTC, → Unix milliseconds. (Envoy logs its local
/// time: the run starts Envoy with `TZ=UTC`.)
fn unix_ms(date: &str, time: &str) -> Option<i64> {
    let mut date = date.split('-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut hms = hms.split(':').map(str::parse::<i64>);
    let (hour, minute, second) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next()?.ok()?);
    let millis: i64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_stamps_become_unix_milliseconds() {
        assert_eq!(unix_ms("1970-01-01", "00:00:00.000"), Some(0));
        assert_eq!(
            rfc3339_unix_ms("2026-12-01T16:36:44.123456Z"),
            Some(1_796_143_004_123)
        );
        assert_eq!(unix_ms("2024-02-29", "23:59:59.9"), Some(1_709_251_199_900));
    }

    #[test]
    fn the_previous_releases_hand_off_line_is_a_hand_off() {
        let line = |said: &str| {
            format!(
                "[2026-12-01 16:36:44.250][24270][warning][wasm] [source/extensions/common/\
                 wasm/context.cc:1154] wasm log keyflight keyflight keyflight: keyflight: {said}"
            )
        };
        let handed_off = line(
            "scope 91ab fence 2643: finalize failed: answered with HTTP 503; delivering the \
             response, the outbox keeps the lease and retries",
        );
        let evidence = Evidence::read(&[], &[String::new(), handed_off], 1_796_143_004_000);
        assert_eq!(
            evidence.proxy_settles,
            vec![ProxySettle {
                at_ms: 250,
                envoy: 1,
                event: "handoff".into(),
                scope: "91ab".into(),
                fence: 2643,
                call: "finalize".into(),
                by: "stream".into(),
                epoch: 0,
            }]
        );
        for not_a_hand_off in [
            "policy payments: scope 91ab: lease-store claim failed: answered with HTTP 503",
            "finalize: the lease was stolen; delivering the response unrecorded",
            "scope 91ab fence 2643: finalize failed: answered with HTTP 503",
        ] {
            let evidence = Evidence::read(&[], &[line(not_a_hand_off)], 0);
            assert_eq!(evidence.proxy_settles, vec![], "{not_a_hand_off}");
        }
    }

    #[test]
    fn a_hot_restarted_childs_line_names_its_epoch() {
        let line = |epoch: &str| {
            format!(
                "[2026-12-01 16:36:44.250][31638][info][wasm] [source/extensions/common/wasm/\
                 context.cc:1196] {epoch}wasm log keyflight keyflight: evidence=retired \
                 scope=ab fence=41 call=finalize by=outbox | still held"
            )
        };
        let epoch = |text: &str| proxy_settle(0, text, 0).map(|settle| settle.epoch);
        assert_eq!(epoch(&line("epoch=2 ")), Some(2));
        assert_eq!(
            epoch(&line("")),
            Some(0),
            "an epoch-0 process marks nothing"
        );
    }

    #[test]
    fn a_store_line_and_an_envoy_line_are_read_on_the_runs_clock() {
        let start = 1_796_143_004_000;
        let store = r#"{"timestamp":"2026-12-01T16:36:44.123456Z","level":"INFO","fields":{"message":"claim won","evidence":"claim_won","scope":"ab","fingerprint":"cd","claim_id":"0190-x","fence":41,"how":"orphan_takeover","lease_ms":3000,"at_most_once":true},"target":"keyflight_lease_store::evidence"}
{"timestamp":"2026-12-01T16:36:44.200Z","level":"INFO","fields":{"message":"settle applied","evidence":"settle","scope":"ab","claim_id":"0190-x","call":"finalize","outcome":"applied"},"target":"keyflight_lease_store::evidence"}
{"timestamp":"2026-12-01T16:36:44.300Z","level":"INFO","fields":{"message":"claim won","evidence":"claim_won"},"target":"keyflight_lease_store::api"}
not json"#;
        let envoy = "[2026-12-01 16:36:44.250][31638][info][wasm] wasm log keyflight keyflight: \
                     evidence=settle_landed scope=ab fence=41 call=finalize by=outbox | recorded\n\
                     [2026-12-01 16:36:44.260][31638][info][wasm] keyflight: scope ab: other";
        let evidence = Evidence::read(
            &[store.to_owned()],
            &[String::new(), envoy.to_owned()],
            start,
        );
        assert_eq!(
            evidence.claims,
            vec![ClaimWon {
                at_ms: 123,
                store: 0,
                scope: "ab".into(),
                fingerprint: "cd".into(),
                claim_id: "0190-x".into(),
                fence: 41,
                how: "orphan_takeover".into(),
                at_most_once: true,
            }],
            "an unknown `how` is kept as logged"
        );
        assert_eq!(evidence.store_settles.len(), 1);
        assert!(evidence.store_settles[0].applied());
        assert_eq!(
            evidence.proxy_settles,
            vec![ProxySettle {
                at_ms: 250,
                envoy: 1,
                event: "settle_landed".into(),
                scope: "ab".into(),
                fence: 41,
                call: "finalize".into(),
                by: "outbox".into(),
                epoch: 0,
            }]
        );
        assert_eq!(evidence.first_landed(&evidence.claims[0]), Some(200));
    }

    /// A release's line carries the database's stamps (Unix ms), read onto the run's clock:
    /// the judge times the record's cooldown from them, not from the line.
    #[test]
    fn a_releases_database_stamps_are_read_on_the_runs_clock() {
        let start = 1_796_143_004_000;
        let line = r#"{"timestamp":"2026-12-01T16:36:46.500Z","level":"INFO","fields":{"message":"settle applied","evidence":"settle","scope":"ab","claim_id":"0190-x","call":"release_cooldown","outcome":"applied","repeat":true,"released_at_unix_ms":1796143004290,"cooldown_ends_at_unix_ms":1796143006290},"target":"keyflight_lease_store::evidence"}"#;
        let evidence = Evidence::read(&[line.to_owned()], &[], start);
        let settle = &evidence.store_settles[0];
        assert_eq!(
            (
                settle.at_ms,
                settle.repeat,
                settle.applied_at_ms,
                settle.cooldown_ends_at_ms
            ),
            (2500, true, Some(290), Some(2290))
        );
    }

    /// An orphan's release says what it left of the record: a takeover given back keeps
    /// it, so the judge refuses a fresh insert after it (`rerun::chain_holds`).
    #[test]
    fn an_orphan_releases_line_says_what_it_left() {
        let line = r#"{"timestamp":"2026-12-01T16:36:46.500Z","level":"INFO","fields":{"message":"released an orphan claim: it committed, and its caller never got the answer","evidence":"settle","scope":"ab","claim_id":"0190-x","call":"release_orphan","outcome":"applied","fence":7,"leaves":"failed"},"target":"keyflight_lease_store::evidence"}"#;
        let evidence = Evidence::read(&[line.to_owned()], &[], 1_796_143_004_000);
        assert_eq!(evidence.store_settles[0].leaves.as_deref(), Some("failed"));
    }
}
