//! After the run: reads the upstream's execution log, and sends every key's own request once
//! more through every Envoy — to see a delivered answer (a 2xx or a recorded 4xx) replay, an
//! `unknown` record still answer `operation_unknown` — then, for each key whose conflict
//! caller got 409, the other body again, to see it still conflict. The checker judges what
//! each key had to answer (`checker/judgement.rs`). A run with `--upstream-effects` also
//! reads the upstream's payments (`GET /effects`): an operation paid more than once fails it;
//! and its ledger (`GET /effects/ledger`), the service's own evidence the judge reads for
//! `uncertain: reconcile` (`checker/reconcile.rs`).
//!
//! A check that meets an unavailable store (503 `journal_unavailable`, no connection, no
//! answer in time) is tried again, up to [`TRIES`] times; the checker reads a check that
//! still could not get through as *unverified*, never as passed.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;

use crate::history::{Attempt, Execution, Ledger, Ms, Payment, Reconciliation, Role, Verification};
use crate::plan::{KeyPlan, PATIENT_TIMEOUT_MS};
use crate::stack::Endpoints;
use crate::workload::{Request, body, send};

/// Tries per check.
const TRIES: u32 = 4;

/// Pause between tries.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Checks in flight at once.
const CONCURRENCY: usize = 8;

/// One line of `GET /executions`, as the demo upstream writes it.
#[derive(Debug, Deserialize)]
struct LoggedExecution {
    execution: u64,
    at_unix_ms: u64,
    path: String,
    key: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    fence: Option<String>,
    body_sha256: String,
    via: Option<String>,
    caller_request_id: Option<String>,
    #[serde(default)]
    answered: Option<u16>,
    #[serde(default)]
    reset: bool,
}

/// What the upstream's payments database holds after a run with `--upstream-effects`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Effects {
    /// Payments committed.
    pub payments: u64,
    /// Operations (scopes) with more than one payment: re-run effects.
    #[serde(rename = "operations_paid_more_than_once")]
    pub paid_more_than_once: u64,
}

impl std::fmt::Display for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "upstream effects (keyflight-effects): {} payments, {} re-run effects \
             (operations paid more than once){}",
            self.payments,
            self.paid_more_than_once,
            if self.paid_more_than_once == 0 {
                ""
            } else {
                ": FAILED"
            }
        )
    }
}

/// The upstream's payments (`GET /effects`).
pub async fn effects(client: &reqwest::Client, endpoints: &Endpoints) -> Result<Effects, String> {
    let url = format!("http://{}/effects", endpoints.upstream);
    client
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("GET {url}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET {url}: {e}"))
}

/// The upstream's ledger (`GET /effects/ledger`): its payments, and its reconcile answers
/// with their times on the run's clock.
pub async fn ledger(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    run_start_unix_ms: u64,
) -> Result<Ledger, String> {
    #[derive(Deserialize)]
    struct Logged {
        payments: Vec<Payment>,
        reconciliations: Vec<LoggedReconciliation>,
    }
    #[derive(Deserialize)]
    struct LoggedReconciliation {
        at_unix_ms: u64,
        scope: String,
        asked_fence: u64,
        outcome: String,
    }
    let url = format!("http://{}/effects/ledger", endpoints.upstream);
    let logged: Logged = client
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("GET {url}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    Ok(Ledger {
        payments: logged.payments,
        reconciliations: logged
            .reconciliations
            .into_iter()
            .map(|answer| Reconciliation {
                at_ms: on_the_run_clock(answer.at_unix_ms, run_start_unix_ms),
                scope: answer.scope,
                asked_fence: answer.asked_fence,
                absent: answer.outcome == "absent",
            })
            .collect(),
    })
}

/// The upstream's executions numbered above `after`, their times on the run's clock
/// (`run_start_unix_ms` is the wall-clock time the run's clock started).
pub async fn executions(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    after: u64,
    run_start_unix_ms: u64,
) -> Result<Vec<Execution>, String> {
    let url = format!("http://{}/executions?after={after}", endpoints.upstream);
    let text = client
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("GET {url}: {e}"))?
        .text()
        .await
        .map_err(|e| format!("read {url}: {e}"))?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let logged: LoggedExecution = serde_json::from_str(line)
                .map_err(|e| format!("{url}: a line is not an execution ({e}): {line}"))?;
            Ok(convert(logged, run_start_unix_ms))
        })
        .collect()
}

/// `unix` milliseconds on the run's clock, which started at `run_start_unix_ms`.
fn on_the_run_clock(unix: u64, run_start_unix_ms: u64) -> Ms {
    Ms::try_from(i128::from(unix) - i128::from(run_start_unix_ms)).unwrap_or(Ms::MAX)
}

fn convert(logged: LoggedExecution, run_start_unix_ms: u64) -> Execution {
    Execution {
        execution: logged.execution,
        at_ms: on_the_run_clock(logged.at_unix_ms, run_start_unix_ms),
        path: logged.path,
        key: logged.key,
        scope: logged.scope,
        fence: logged.fence.and_then(|fence| fence.trim().parse().ok()),
        body_sha256: logged.body_sha256,
        via: logged.via.as_deref().and_then(parse_via),
        caller_request_id: logged.caller_request_id,
        answered: logged.answered,
        reset: logged.reset,
    }
}

/// `envoy-N` → `N` (the value of [`keyflight_testkit::stack::VIA_HEADER`]).
fn parse_via(value: &str) -> Option<usize> {
    value.strip_prefix("envoy-")?.parse().ok()
}

/// Sends every key's own request once more through each Envoy, then the other body of
/// every key whose conflict caller got 409 (after: on a key with no record, the other body
/// would win and run).
pub async fn replays(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    keys: &[KeyPlan],
    attempts: &[Attempt],
) -> Vec<Verification> {
    let conflicted: BTreeSet<&str> = attempts
        .iter()
        .filter(|attempt| {
            attempt.role == Role::Conflict
                && attempt.outcome.problem_code() == Some("idempotency_conflict")
        })
        .map(|attempt| attempt.key.as_str())
        .collect();
    let envoys = endpoints.listeners.len();
    let own = keys
        .iter()
        .flat_map(|key| (0..envoys).map(move |envoy| (key, envoy, false)));
    let mut checks = run_checks(client, endpoints, own).await;
    let other = keys
        .iter()
        .filter(|key| conflicted.contains(key.key.as_str()))
        .flat_map(|key| (0..envoys).map(move |envoy| (key, envoy, true)));
    checks.extend(run_checks(client, endpoints, other).await);
    checks
}

async fn run_checks<'a>(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    checks: impl Iterator<Item = (&'a KeyPlan, usize, bool)>,
) -> Vec<Verification> {
    futures_util::stream::iter(checks)
        .map(|(key, envoy, conflict)| replay(client, endpoints, key, envoy, conflict))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

async fn replay(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    key: &KeyPlan,
    envoy: usize,
    conflict: bool,
) -> Verification {
    let mut tries = 0;
    let kind = if conflict { "conflict" } else { "own" };
    loop {
        tries += 1;
        let request = Request {
            id: format!("{}-verify-{kind}-{envoy}-{tries}", key.key),
            key: key.key.clone(),
            path: key.path(),
            body: body(key, u64::from(conflict)),
            envoy,
            timeout: Duration::from_millis(PATIENT_TIMEOUT_MS),
        };
        let (outcome, _) = send(client, endpoints, &request).await;
        if tries >= TRIES || !outcome.unavailable() {
            return Verification {
                key: key.key.clone(),
                envoy,
                conflict,
                outcome,
                tries,
            };
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_execution_is_put_on_the_runs_clock() {
        let logged: LoggedExecution = serde_json::from_str(
            r#"{"execution":4,"at_unix_ms":10250,"path":"/payments","key":"k","fence":"17",
               "body_sha256":"sha256:aa","via":"envoy-1","caller_request_id":"k-first-0-0"}"#,
        )
        .expect("the upstream's format");
        let execution = convert(logged, 10_000);
        assert_eq!(execution.at_ms, 250);
        assert_eq!(execution.fence, Some(17));
        assert_eq!(execution.via, Some(1));
        assert_eq!(execution.caller_request_id.as_deref(), Some("k-first-0-0"));
    }

    #[test]
    fn a_via_header_names_an_envoy_or_nothing() {
        assert_eq!(parse_via(&keyflight_testkit::stack::via_value(3)), Some(3));
        assert_eq!(parse_via("proxy"), None);
    }

    #[test]
    fn an_operation_paid_twice_is_a_failure_the_summary_names() {
        let effects: Effects =
            serde_json::from_str(r#"{"payments": 3, "operations_paid_more_than_once": 1}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            effects,
            Effects {
                payments: 3,
                paid_more_than_once: 1
            }
        );
        assert!(effects.to_string().ends_with("FAILED"), "{effects}");
    }
}
