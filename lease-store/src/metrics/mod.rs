//! L8: Prometheus metrics, mirroring the filter's F13 counters.
//!
//! One [`Metrics`] value is created at start-up and shared by the handlers,
//! the request middleware and the clean-up task. Counters are updated where
//! the thing happens; the gauges (the pool's occupancy, the parked
//! long-polls, the calls queued for a batch) are read at scrape time, so they
//! are never stale and need no background task. The batch-size histogram is
//! the store's own ([`BatchSizes`]): the store records it as batches run, this
//! registry only exposes it.
//!
//! Label values are `&'static str` taken from the protocol's enums, so a
//! metric can never grow an unbounded label set from request data; the route
//! label is axum's matched route template (`/v1/claims/{scope}`), not the URI,
//! and the workload label is an allowlisted SPIFFE id, `bearer` or `other`
//! ([`crate::caller`]), never an id the allowlist does not hold.

mod labels;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use keyflight_protocol::ProblemCode;
use keyflight_protocol::wire::ClaimResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use labels::{
    CodeLabel, EventLabel, KindLabel, OutcomeLabel, ReasonLabel, RefusedLabel, RouteLabel,
    WorkloadLabel,
};
pub use labels::{Event, Shed};

use crate::quota::QuotaGauges;
use crate::store::BatchSizes;

/// Latency buckets, in seconds: 0.1 ms (a cached answer) to 10 s (a long-poll).
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Media type of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Calls waiting for a group-commit worker, per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchQueued {
    /// Claims queued.
    pub claims: usize,
    /// Finalizes queued.
    pub finalizes: usize,
}

/// Connection pool occupancy, as the pool reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections open.
    pub size: usize,
    /// Connections idle and ready.
    pub available: usize,
    /// Callers waiting for a connection.
    pub waiting: usize,
    /// The database probe found its session without the settings every connection asks
    /// for (`docs/configuration.md#the-connection-pool`).
    pub settings_missing: bool,
}

/// The lease-store's metrics registry and handles.
#[derive(Debug, Clone)]
pub struct Metrics(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    registry: Registry,
    claims: Family<OutcomeLabel, Counter>,
    events: Family<EventLabel, Counter>,
    ttl_deletes: Counter,
    errors: Family<CodeLabel, Counter>,
    durations: Family<RouteLabel, Histogram>,
    pool_size: Gauge,
    pool_available: Gauge,
    pool_waiting: Gauge,
    pool_settings_missing: Gauge,
    longpoll_waiting: Gauge,
    batch_queued: Family<KindLabel, Gauge>,
    shed: Family<ReasonLabel, Counter>,
    caller_calls: Family<WorkloadLabel, Counter>,
    caller_refused: Family<RefusedLabel, Counter>,
    framed_answers: Counter,
    quota: QuotaGauges,
}

impl Metrics {
    /// Creates and registers every metric; `batch_sizes`, `orphans_released` and
    /// `lapses_held` are the store's.
    pub fn new(batch_sizes: &BatchSizes, orphans_released: Counter, lapses_held: Counter) -> Self {
        let mut registry = Registry::default();
        let claims = Family::<OutcomeLabel, Counter>::default();
        let events = Family::<EventLabel, Counter>::default();
        let ttl_deletes = Counter::default();
        let errors = Family::<CodeLabel, Counter>::default();
        let durations = Family::<RouteLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(LATENCY_BUCKETS)) as fn() -> Histogram,
        );
        let (pool_size, pool_available, pool_waiting, pool_settings_missing, longpoll_waiting) = (
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
            Gauge::default(),
        );
        registry.register(
            "keyflight_store_claims",
            "Claim answers by outcome",
            claims.clone(),
        );
        registry.register(
            "keyflight_store_events",
            "Lease events (claims won, recoveries, follower waits, lost leases, writes)",
            events.clone(),
        );
        registry.register(
            "keyflight_store_ttl_deletes",
            "Records deleted by retention clean-up",
            ttl_deletes.clone(),
        );
        registry.register(
            "keyflight_store_errors",
            "Problem answers by code",
            errors.clone(),
        );
        registry.register(
            "keyflight_store_request_duration_seconds",
            "HTTP request latency by route",
            durations.clone(),
        );
        registry.register(
            "keyflight_store_pool_size",
            "Postgres connections open",
            pool_size.clone(),
        );
        registry.register(
            "keyflight_store_pool_available",
            "Postgres connections idle",
            pool_available.clone(),
        );
        registry.register(
            "keyflight_store_pool_waiting",
            "Callers waiting for a Postgres connection",
            pool_waiting.clone(),
        );
        registry.register(
            "keyflight_store_pool_settings_missing",
            "1 when the last probe found a pooled session without the settings the store asks for (a pooler dropping `options`)",
            pool_settings_missing.clone(),
        );
        registry.register(
            "keyflight_store_longpoll_waiting",
            "Long-polling claims parked, waiting for a settle, a lease expiry or their deadline",
            longpoll_waiting.clone(),
        );
        registry.register(
            "keyflight_store_batch_size",
            "Calls per group-commit batch, by kind (claim, finalize); 1 = ran alone",
            batch_sizes.family(),
        );
        registry.register(
            "keyflight_store_orphans_released",
            "Claims committed after their caller stopped waiting, released unanswered",
            orphans_released,
        );
        registry.register(
            "keyflight_store_lapses_held",
            "Lapsed leases of at-most-once claims made unknown instead of taken over",
            lapses_held,
        );
        let batch_queued = Family::<KindLabel, Gauge>::default();
        registry.register(
            "keyflight_store_batch_queued",
            "Calls waiting for a group-commit worker, by kind",
            batch_queued.clone(),
        );
        let shed = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "keyflight_store_shed",
            "Connections and calls turned away at once by a limit, by reason",
            shed.clone(),
        );
        let caller_calls = Family::<WorkloadLabel, Counter>::default();
        registry.register(
            "keyflight_store_caller_calls",
            "Data-plane calls let in, by workload (allowlisted SPIFFE id, or bearer)",
            caller_calls.clone(),
        );
        let caller_refused = Family::<RefusedLabel, Counter>::default();
        registry.register(
            "keyflight_store_caller_refused",
            "Data-plane calls refused by authentication, by workload (allowlisted id, bearer or other) and reason",
            caller_refused.clone(),
        );
        let framed_answers = Counter::default();
        registry.register(
            "keyflight_store_framed_answers",
            "Completed claim answers sent with the recorded body as raw bytes, to edges that ask",
            framed_answers.clone(),
        );
        let quota = QuotaGauges::default();
        quota.register(&mut registry);
        Metrics(Arc::new(Inner {
            registry,
            claims,
            events,
            ttl_deletes,
            errors,
            durations,
            pool_size,
            pool_available,
            pool_waiting,
            pool_settings_missing,
            longpoll_waiting,
            batch_queued,
            shed,
            caller_calls,
            caller_refused,
            framed_answers,
            quota,
        }))
    }

    /// The storage quota's families (`crate::quota`), registered here.
    pub fn quota_gauges(&self) -> QuotaGauges {
        self.0.quota.clone()
    }

    /// Counts a `completed` claim answer sent as a frame
    /// (`docs/records.md#the-recorded-body-as-bytes`).
    pub fn framed_answer(&self) {
        self.0.framed_answers.inc();
    }

    /// Counts a data-plane call let in for `workload` (a bounded label, [`crate::caller`]).
    pub fn caller_call(&self, workload: &str) {
        self.0
            .caller_calls
            .get_or_create(&WorkloadLabel {
                workload: workload.to_owned(),
            })
            .inc();
    }

    /// Counts a data-plane call refused for `reason`.
    pub fn caller_refused(&self, workload: &str, reason: &'static str) {
        self.0
            .caller_refused
            .get_or_create(&RefusedLabel {
                workload: workload.to_owned(),
                reason,
            })
            .inc();
    }

    /// Counts a claim's answer, and the winning event if it won.
    pub fn claim_answered(&self, response: &ClaimResponse) {
        let outcome = match response {
            ClaimResponse::Won { how, .. } => {
                self.event(match how {
                    keyflight_protocol::wire::WonHow::Claimed => Event::Claimed,
                    keyflight_protocol::wire::WonHow::RecoveredTtl => Event::RecoveredTtl,
                    keyflight_protocol::wire::WonHow::RecoveredAbandoned => {
                        Event::RecoveredAbandoned
                    }
                });
                "won"
            }
            ClaimResponse::Completed { .. } => "completed",
            ClaimResponse::Conflict => "conflict",
            ClaimResponse::InProgress { .. } => "in_progress",
            ClaimResponse::Cooldown { .. } => "cooldown",
            ClaimResponse::NotReplayable => "not_replayable",
            ClaimResponse::Unknown { .. } => "unknown",
        };
        self.0.claims.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Counts an event.
    pub fn event(&self, event: Event) {
        self.0
            .events
            .get_or_create(&EventLabel {
                event: event.as_str(),
            })
            .inc();
    }

    /// Counts a connection or call turned away by a limit.
    pub fn shed(&self, reason: Shed) {
        self.0
            .shed
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// Counts rows removed by retention clean-up.
    pub fn ttl_deleted(&self, rows: u64) {
        self.0.ttl_deletes.inc_by(rows);
    }

    /// Counts a problem answer.
    pub fn error(&self, code: ProblemCode) {
        self.0
            .errors
            .get_or_create(&CodeLabel {
                code: code.as_str(),
            })
            .inc();
    }

    /// Records a request's latency under its route template.
    pub fn observe(&self, route: &str, elapsed: Duration) {
        self.0
            .durations
            .get_or_create(&RouteLabel {
                route: route.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Renders the text exposition, after refreshing the gauges read at
    /// scrape time: the pool's occupancy, the parked long-polls and the
    /// calls queued for a batch.
    pub fn render(&self, pool: PoolStatus, longpoll_waiting: usize, queued: BatchQueued) -> String {
        for (kind, calls) in [("claim", queued.claims), ("finalize", queued.finalizes)] {
            self.0
                .batch_queued
                .get_or_create(&KindLabel { kind })
                .set(gauge_value(calls));
        }
        self.0.pool_size.set(gauge_value(pool.size));
        self.0.pool_available.set(gauge_value(pool.available));
        self.0.pool_waiting.set(gauge_value(pool.waiting));
        self.0
            .pool_settings_missing
            .set(i64::from(pool.settings_missing));
        self.0.longpoll_waiting.set(gauge_value(longpoll_waiting));
        let mut text = String::new();
        // Writing into a String cannot fail; an encoder error would only drop the scrape.
        if encode(&mut text, &self.0.registry).is_err() {
            tracing::error!("metrics encoding failed");
        }
        text
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Middleware: times every routed request and counts problem answers by code.
pub async fn track(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    if let Some(route) = route {
        metrics.observe(&route, started.elapsed());
    }
    if let Some(code) = response.extensions().get::<ProblemCode>() {
        metrics.error(*code);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_the_counters() {
        let batch_sizes = BatchSizes::default();
        let lapses_held = Counter::default();
        lapses_held.inc();
        let metrics = Metrics::new(&batch_sizes, Counter::default(), lapses_held);
        metrics.claim_answered(&ClaimResponse::Conflict);
        metrics.event(Event::FollowerWait);
        metrics.ttl_deleted(3);
        metrics.shed(Shed::Concurrency);
        metrics.caller_call("spiffe://td/ns/a/sa/b");
        metrics.caller_refused("other", "not_allowed");
        metrics.error(ProblemCode::LeaseLost);
        metrics.observe("/v1/claims/{scope}", Duration::from_millis(2));
        let text = metrics.render(
            PoolStatus {
                size: 4,
                available: 3,
                waiting: 0,
                settings_missing: true,
            },
            2,
            BatchQueued {
                claims: 5,
                finalizes: 0,
            },
        );
        for line in [
            "keyflight_store_claims_total{outcome=\"conflict\"} 1",
            "keyflight_store_events_total{event=\"follower_wait\"} 1",
            "keyflight_store_ttl_deletes_total 3",
            "keyflight_store_lapses_held_total 1",
            "keyflight_store_pool_settings_missing 1",
            "keyflight_store_shed_total{reason=\"concurrency\"} 1",
            "keyflight_store_caller_calls_total{workload=\"spiffe://td/ns/a/sa/b\"} 1",
            "keyflight_store_caller_refused_total{workload=\"other\",reason=\"not_allowed\"} 1",
            "keyflight_store_errors_total{code=\"lease_lost\"} 1",
            "keyflight_store_request_duration_seconds_count{route=\"/v1/claims/{scope}\"} 1",
            "keyflight_store_pool_size 4",
            "keyflight_store_pool_available 3",
            "keyflight_store_longpoll_waiting 2",
            "keyflight_store_batch_queued{kind=\"claim\"} 5",
            "keyflight_store_batch_queued{kind=\"finalize\"} 0",
        ] {
            assert!(text.contains(line), "missing `{line}` in:\n{text}");
        }
    }
}
