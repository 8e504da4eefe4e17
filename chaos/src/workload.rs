//! Runs the plan's callers against the stack and records every attempt.
//!
//! Each key is one task, started at its planned time: its first callers run concurrently
//! (one per Envoy in turn), then its late caller, then (when a first caller got a success)
//! its conflict caller. A caller sends its attempts one after another until one is an answer
//! it keeps (a 2xx, a 3xx, or a 4xx other than 429), up to [`crate::plan::MAX_ATTEMPTS`], and never
//! starts one after the run's retry deadline. Between attempts it waits the answer's
//! `Retry-After` (capped at [`MAX_RETRY_AFTER`]) or its planned backoff.
//!
//! Every request carries the same `host` (the authority is part of the scope, so both
//! Envoys must see one service name), the principal header of the demo policy, the key, and
//! `x-caller-request-id` with the attempt's id, which the upstream logs with the execution.

use std::time::Duration;

use futures_util::future::join_all;
use keyflight_testkit::stack::SHARED_AUTHORITY;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::history::{Attempt, Ms, Outcome, Role};
use crate::plan::{CallerPlan, KeyPlan};
use crate::stack::Endpoints;

/// The header with the caller's id for one attempt (the demo upstream logs it).
pub const CALLER_REQUEST_HEADER: &str = "x-caller-request-id";

/// The principal every request claims (the demo policy reads it from `x-user`).
const USER: &str = "chaos";

/// The longest `Retry-After` a caller honours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3);

/// The run's clock: milliseconds since it started.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock starting now.
    pub fn start() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }

    /// Milliseconds since the start.
    pub fn now_ms(&self) -> Ms {
        Ms::try_from(self.start.elapsed().as_millis()).unwrap_or(Ms::MAX)
    }

    /// The instant `ms` after the start.
    pub fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }
}

/// One request as a caller sends it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The attempt id (`x-caller-request-id`).
    pub id: String,
    /// The idempotency key.
    pub key: String,
    /// The path with query.
    pub path: String,
    /// The JSON body.
    pub body: Vec<u8>,
    /// The Envoy to send it to.
    pub envoy: usize,
    /// How long to wait for the whole answer.
    pub timeout: Duration,
}

/// The body of a key's requests: `amount_offset` 0 for the key's own body, 1 for the
/// conflicting one.
pub fn body(key: &KeyPlan, amount_offset: u64) -> Vec<u8> {
    json!({"amount": key.amount + amount_offset, "currency": "EUR", "key": key.key})
        .to_string()
        .into_bytes()
}

/// `sha256:<hex>` of `bytes`, as the upstream's log prints it.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Runs every key of the plan; returns every attempt.
pub async fn run(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    keys: &[KeyPlan],
    clock: Clock,
    retry_deadline_ms: u64,
) -> Vec<Attempt> {
    let tasks = keys
        .iter()
        .map(|key| run_key(client, endpoints, key, clock, retry_deadline_ms));
    join_all(tasks).await.into_iter().flatten().collect()
}

async fn run_key<'a>(
    client: &'a reqwest::Client,
    endpoints: &'a Endpoints,
    key: &'a KeyPlan,
    clock: Clock,
    retry_deadline_ms: u64,
) -> Vec<Attempt> {
    tokio::time::sleep_until(clock.at(key.start_ms)).await;
    let caller = |plan: &'a CallerPlan| {
        let offset = u64::from(plan.role == Role::Conflict);
        run_caller(
            client,
            endpoints,
            key,
            plan,
            body(key, offset),
            clock,
            retry_deadline_ms,
        )
    };
    let firsts = key.callers.iter().filter(|c| c.role == Role::First);
    let mut attempts: Vec<Attempt> = join_all(firsts.map(caller)).await.concat();
    let succeeded = attempts.iter().any(|a| a.outcome.success().is_some());
    for plan in key.callers.iter().filter(|c| c.role == Role::Late) {
        attempts.extend(caller(plan).await);
    }
    if succeeded {
        for plan in key.callers.iter().filter(|c| c.role == Role::Conflict) {
            attempts.extend(caller(plan).await);
        }
    }
    attempts
}

async fn run_caller(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    key: &KeyPlan,
    plan: &CallerPlan,
    body: Vec<u8>,
    clock: Clock,
    retry_deadline_ms: u64,
) -> Vec<Attempt> {
    tokio::time::sleep(Duration::from_millis(plan.start_after_ms)).await;
    let body_sha256 = sha256(&body);
    let mut attempts = Vec::new();
    for (n, &envoy) in plan.envoys.iter().enumerate() {
        let attempt = u32::try_from(n).unwrap_or(u32::MAX);
        if attempt > 0 && clock.now_ms() > Ms::try_from(retry_deadline_ms).unwrap_or(Ms::MAX) {
            break;
        }
        let timeout_ms = match attempt {
            0 => plan.first_timeout_ms,
            _ => crate::plan::PATIENT_TIMEOUT_MS,
        };
        let request = Request {
            id: format!("{}-{attempt}", plan.name),
            key: key.key.clone(),
            path: key.path(),
            body: body.clone(),
            envoy,
            timeout: Duration::from_millis(timeout_ms),
        };
        let start_ms = clock.now_ms();
        let (outcome, retry_after) = send(client, endpoints, &request).await;
        let end_ms = clock.now_ms();
        let done = keeps(&outcome);
        attempts.push(Attempt {
            id: request.id,
            key: key.key.clone(),
            caller: plan.name.clone(),
            role: plan.role,
            attempt,
            envoy,
            body_sha256: body_sha256.clone(),
            timeout_ms,
            start_ms,
            end_ms,
            outcome,
        });
        if done {
            break;
        }
        let backoff = plan
            .backoff_ms
            .get(n)
            .map_or(Duration::from_millis(300), |ms| Duration::from_millis(*ms));
        tokio::time::sleep(retry_after.map_or(backoff, |after| after.min(MAX_RETRY_AFTER))).await;
    }
    attempts
}

/// Whether a caller keeps this outcome (no retry): a 2xx, a 3xx (a client would follow
/// it), or a 4xx other than 429.
fn keeps(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Answered { status, .. } => {
            (200..400).contains(status) || ((400..500).contains(status) && *status != 429)
        }
        Outcome::GaveUp | Outcome::ConnectionError { .. } => false,
    }
}

/// Sends one request; returns what came back and its `Retry-After`.
pub async fn send(
    client: &reqwest::Client,
    endpoints: &Endpoints,
    request: &Request,
) -> (Outcome, Option<Duration>) {
    let Some(listener) = endpoints.listeners.get(request.envoy) else {
        return (
            Outcome::ConnectionError {
                error: format!("there is no Envoy {}", request.envoy),
            },
            None,
        );
    };
    let url = format!("http://{listener}{}", request.path);
    let sent = client
        .post(&url)
        .timeout(request.timeout)
        .header("host", SHARED_AUTHORITY)
        .header("x-user", USER)
        .header("content-type", "application/json")
        .header("idempotency-key", &request.key)
        .header(CALLER_REQUEST_HEADER, &request.id)
        .body(request.body.clone())
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => return (failed(&error), None),
    };
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let replayed = header("idempotent-replayed").as_deref() == Some("true");
    let is_problem =
        header("content-type").is_some_and(|value| value.starts_with("application/problem+json"));
    let retry_after = header("retry-after")
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = match response.bytes().await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) => return (failed(&error), None),
    };
    let problem_code = is_problem
        .then(|| serde_json::from_str::<serde_json::Value>(&body).ok())
        .flatten()
        .and_then(|problem| problem["code"].as_str().map(str::to_owned));
    (
        Outcome::Answered {
            status,
            body,
            replayed,
            problem_code,
        },
        retry_after,
    )
}

fn failed(error: &reqwest::Error) -> Outcome {
    if error.is_timeout() {
        Outcome::GaveUp
    } else {
        Outcome::ConnectionError {
            error: error_chain(error),
        }
    }
}

/// The error with its causes (reqwest's own message hides what the connection did).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> Outcome {
        Outcome::Answered {
            status,
            body: String::new(),
            replayed: false,
            problem_code: None,
        }
    }

    #[test]
    fn a_caller_keeps_answers_and_retries_the_rest() {
        for status in [200, 201, 302, 303, 400, 409, 422] {
            assert!(keeps(&answered(status)), "{status}");
        }
        for status in [429, 500, 503, 504] {
            assert!(!keeps(&answered(status)), "{status}");
        }
        assert!(!keeps(&Outcome::GaveUp));
        assert!(!keeps(&Outcome::ConnectionError {
            error: "reset".into()
        }));
    }

    #[test]
    fn the_body_digest_matches_the_upstreams_format() {
        assert_eq!(
            sha256(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
