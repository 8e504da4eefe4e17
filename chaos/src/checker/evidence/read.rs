//! Reading the logs into [`Evidence`]: the lease-stores' JSON `evidence` lines and the
//! Envoys' `evidence=` lines (and the previous release's hand-off line), each put on the
//! run's clock. The formats are the components' own; this is the one place that parses them.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::clock::{on_run_clock, rfc3339_unix_ms, unix_ms};
use super::*;
use crate::history::Ms;

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
}

/// One `evidence=` line of Envoy `envoy`'s log: `[date time.ms][thread][level][logger]
/// … [epoch=E ]… evidence=EVENT scope=… fence=N call=… by=… | note`.
pub(super) fn proxy_settle(
    envoy: usize,
    line: &str,
    run_start_unix_ms: u64,
) -> Option<ProxySettle> {
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
