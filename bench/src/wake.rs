//! P3: how fast followers waiting on a held winner get their answer once it exists.
//!
//! Per round, on a fresh key: the winner's request is held at a demo-upstream gate
//! (`?hold=GATE`); once it is parked there, N followers send the same request and go into
//! the lease-store's long-poll (F5), a worker's followers of one request sharing one
//! (`docs/stream-machine.md#herds`). When the store's `follower_wait` events and the
//! filter's `herd_joined` events add up to N, the gate opens. The clock starts when the open call returns: the winner's answer
//! leaves the upstream right after, so this start is never late and the figure is an upper
//! bound. Each follower's latency runs to its complete answer (a replay of the winner's).
//! The window includes the winner's finalize, a durable commit (about 3.3 ms on this disk),
//! then NOTIFY, the long-poll's wake and the replay through Envoy; the time from the
//! winner's own answer to each follower's is recorded too, to separate the fan-out from
//! the commit.
//!
//! Every wait here is on an observable condition (gate count, store counter), polled at a
//! short fixed pace; nothing sleeps to "let things settle".

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use keyflight_testkit::metrics::StoreMetrics;

use crate::error::BenchError;
use crate::http::Connection;
use crate::report::Row;
use crate::stats::{self, Percentiles, Recorder, Target};
use crate::workload::RequestTemplate;

/// How often a condition is re-checked.
const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// How long a condition may take before the round fails.
const CONDITION_TIMEOUT: Duration = Duration::from_secs(10);

/// What P3 measured.
#[derive(Debug, Clone)]
pub struct WakeResult {
    /// Gate open → each follower's answer, microseconds.
    pub from_gate: Histogram<u64>,
    /// Winner's answer → each follower's answer (0 when the follower was first).
    pub from_winner: Histogram<u64>,
    /// Gate open → the winner's answer.
    pub winner: Histogram<u64>,
    /// Followers that did not get a replay of the winner's answer.
    pub failures: u64,
    /// The first such failure.
    pub first_failure: Option<String>,
}

/// Where P3 sends what.
#[derive(Debug, Clone)]
pub struct WakeSetup {
    /// The guarded payment request (`{unique}` in the key header is replaced per round).
    pub request: RequestTemplate,
    /// The demo upstream's `host:port` (gates).
    pub upstream: String,
    /// The lease-store's `host:port` (`/metrics`).
    pub store: String,
    /// The guarded Envoy's admin `host:port` (`/stats`).
    pub envoy_admin: String,
    /// Followers per round.
    pub followers: usize,
    /// Rounds.
    pub rounds: usize,
}

/// Runs P3's rounds; `run_id` keeps keys and gate names unique to this run.
pub async fn run(setup: &WakeSetup, run_id: &str) -> Result<WakeResult, BenchError> {
    let mut result = WakeResult {
        from_gate: stats::histogram(),
        from_winner: stats::histogram(),
        winner: stats::histogram(),
        failures: 0,
        first_failure: None,
    };
    let mut upstream = Connection::open(&setup.upstream).await?;
    let mut store = Connection::open(&setup.store).await?;
    let mut envoy = Connection::open(&setup.envoy_admin).await?;
    for round in 0..setup.rounds {
        let gate = format!("bench-wake-{run_id}-{round}");
        let mut request = setup.request.clone();
        request.target = request
            .target
            .with_path(&format!("{}?hold={gate}", request.target.path));
        let request = Arc::new(request);
        let key = format!("{run_id}-{round}");
        let waits_before = followers_parked(&mut store, &mut envoy).await?;

        let winner = spawn_request(Arc::clone(&request), key.clone()).await?;
        let parked = Deadline::new(format!("the winner parked at gate {gate}"));
        while !gate_waiting(&mut upstream, &gate).await? {
            parked.pace().await?;
        }
        let mut followers = Vec::with_capacity(setup.followers);
        for _ in 0..setup.followers {
            followers.push(spawn_request(Arc::clone(&request), key.clone()).await?);
        }
        let expected = waits_before + setup.followers as u64;
        let waiting = Deadline::new(format!("{} followers waiting", setup.followers));
        while followers_parked(&mut store, &mut envoy).await? < expected {
            waiting.pace().await?;
        }

        let path = format!("/gates/{gate}/open");
        let opened = upstream
            .send(Method::POST, &path, &[], Bytes::new())
            .await?;
        let gate_opened = Instant::now();
        if !opened.status.is_success() {
            return Err(BenchError::Answer(format!(
                "open gate {gate}: {}",
                opened.status
            )));
        }

        let (winner_status, winner_at) = winner
            .await
            .map_err(|e| BenchError::Answer(format!("the winner task failed: {e}")))??;
        if winner_status.0 != StatusCode::CREATED {
            return Err(BenchError::Answer(format!(
                "the winner answered {} (expected 201)",
                winner_status.0
            )));
        }
        let mut from_gate = Recorder::new(None);
        let mut from_winner = Recorder::new(None);
        let mut winner_latency = Recorder::new(None);
        winner_latency.record(winner_at.saturating_duration_since(gate_opened));
        for follower in followers {
            let ((status, replayed), at) = follower
                .await
                .map_err(|e| BenchError::Answer(format!("a follower task failed: {e}")))??;
            if status == StatusCode::CREATED && replayed {
                from_gate.record(at.saturating_duration_since(gate_opened));
                from_winner.record(at.saturating_duration_since(winner_at));
            } else {
                result.failures += 1;
                result.first_failure.get_or_insert_with(|| {
                    format!("a follower answered {status} (replayed: {replayed})")
                });
            }
        }
        let _ = result.from_gate.add(from_gate.into_histogram());
        let _ = result.from_winner.add(from_winner.into_histogram());
        let _ = result.winner.add(winner_latency.into_histogram());
    }
    Ok(result)
}

type Sent = ((StatusCode, bool), Instant);

/// Opens a connection, then sends `request` in a task; the task yields the status, whether
/// the answer was a replay, and when it arrived.
async fn spawn_request(
    request: Arc<RequestTemplate>,
    key: String,
) -> Result<tokio::task::JoinHandle<Result<Sent, BenchError>>, BenchError> {
    let mut connection = Connection::open(&request.target.authority).await?;
    Ok(tokio::spawn(async move {
        let answer = request.send_for_answer(&mut connection, &key).await?;
        let at = Instant::now();
        let replayed = answer
            .headers
            .get(HeaderName::from_static("idempotent-replayed"))
            == Some(&HeaderValue::from_static("true"));
        Ok(((answer.status, replayed), at))
    }))
}

/// How many handlers wait at the upstream's gate.
async fn gate_waiting(upstream: &mut Connection, gate: &str) -> Result<bool, BenchError> {
    let answer = upstream
        .send(Method::GET, &format!("/gates/{gate}"), &[], Bytes::new())
        .await?;
    let status: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|e| BenchError::Answer(format!("gate status is not JSON: {e}")))?;
    Ok(status["waiting"].as_u64().unwrap_or(0) >= 1)
}

/// Followers parked so far: the lease-store's `follower_wait` events (one per long-poll)
/// and the filter's `herd_joined` events (one per follower that joined another's).
async fn followers_parked(
    store: &mut Connection,
    envoy: &mut Connection,
) -> Result<u64, BenchError> {
    let answer = store
        .send(Method::GET, "/metrics", &[], Bytes::new())
        .await?;
    let waits = StoreMetrics::parse(&String::from_utf8_lossy(&answer.body)).event("follower_wait");
    let stats = envoy
        .send(
            Method::GET,
            "/stats?filter=event.herd_joined",
            &[],
            Bytes::new(),
        )
        .await?;
    let joined: u64 = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter_map(|line| line.rsplit_once(": "))
        .filter_map(|(_, value)| value.trim().parse::<u64>().ok())
        .sum();
    Ok(waits + joined)
}

/// A bounded wait for an observable condition.
struct Deadline {
    what: String,
    at: Instant,
}

impl Deadline {
    fn new(what: String) -> Deadline {
        Deadline {
            what,
            at: Instant::now() + CONDITION_TIMEOUT,
        }
    }

    /// Paces the next check; an error once the condition took too long.
    async fn pace(&self) -> Result<(), BenchError> {
        if Instant::now() > self.at {
            return Err(BenchError::Answer(format!(
                "timed out after {CONDITION_TIMEOUT:?} waiting for {}",
                self.what
            )));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
        Ok(())
    }
}

/// A P3 row (with `target`), or a reported wake-up latency (without).
pub fn row(
    scenario: &str,
    histogram: &hdrhistogram::Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
    target: Option<Target>,
) -> Row {
    let latency = Percentiles::of(histogram);
    Row {
        id: if target.is_some() { "P3" } else { "—" }.to_owned(),
        scenario: scenario.to_owned(),
        concurrency: None,
        rps: None,
        latency,
        errors,
        first_error,
        baseline: None,
        ratio: None,
        target,
        met: target.and_then(|t| t.met(None, latency.map(|l| l.p50_ms))),
        cpu_us_per_op: None,
    }
}
