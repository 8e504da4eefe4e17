//! The lease-store's Postgres layer: every SQL statement the service runs.
//!
//! One file per statement family, the SQL next to the Rust that runs it:
//! `claim` (L1, the one-statement claim and the read that explains a lost
//! claim), `lease` (L2, renew/finalize/release fenced by `claim_id`),
//! `watch` (L4, a long-poll follower's mark-then-read), `records` (L6, the
//! operator's list/get/resolve/erase), `epoch` (F9, the operator epoch edges
//! check their cache against), `retention` (L5, the cleanup DELETE),
//! `migrate` (L3), `privilege` (the runtime role's grants and the start-up check of the
//! role the store runs as), and `batch`, which runs claims and finalizes that are
//! already queued together as one statement (group commit,
//! `docs/group-commit.md`).
//! This module holds what they share: the connection pool, the settings and
//! [`StoreError`], the one error type the HTTP layer maps to problem details.
//!
//! Every call borrows a pooled connection for exactly one statement (two for
//! a lost claim or a follower's watch-and-read; one statement for a whole
//! batch) and never holds a transaction open across anything else, so
//! no upstream call, long-poll or client stall can pin a connection or a row
//! lock. Statements are prepared once per connection (`prepare_cached`).
//!
//! Failing closed: anything that keeps a statement from completing — the
//! database down, the pool exhausted past its wait timeout, the
//! `statement_timeout` firing, an unexpected server error — is
//! [`StoreError::Unavailable`], which the filter turns into "do not dispatch".
//!
//! Following the primary (L10): with a multi-host URL and
//! `target_session_attrs=read-write`, every new connection tries the hosts in
//! turn and keeps the one that accepts writes, so after a failover the pool
//! refills on the new primary without a restart. Connections to the old
//! primary end with it (a killed or demoted Postgres closes them; the pool
//! drops closed connections when it next hands one out), and one that stays
//! open on a node that answers read-only is discarded by [`Store::run`]
//! ([`StoreError::ReadOnly`]). docs/failover.md has the whole argument.
//!
//! Bounded answers: `statement_timeout` is enforced by the server, so it
//! cannot help when the server (or the network) stops answering altogether —
//! a frozen host keeps the TCP connection open and the kernel keeps ACKing.
//! Every call therefore runs its database work through [`Store::run`], which
//! gives up after `statement_timeout` + [`ANSWER_MARGIN`] and *discards* the
//! connection it was using (`Object::take`): a connection with a request
//! still in flight is never handed to the next caller. Getting a connection
//! has its own bounds (the pool's wait/create timeouts and `connect_timeout`,
//! split over the URL's hosts by `connection.rs`,
//! all `statement_timeout`). TCP keepalives and `tcp_user_timeout`
//! (`connection.rs`) make the kernel drop connections to a host that is gone, so
//! idle pooled connections and the `LISTEN` connection do not linger for the
//! OS default of two hours.

mod batch;
mod claim;
mod connection;
mod dual;
mod epoch;
mod held;
#[cfg(test)]
mod keyed_plans_tests;
mod lease;
mod migrate;
mod orphan;
mod partitions;
mod privilege;
mod probe;
mod reconciled;
mod records;
mod retention;
mod snapshot;
mod takeover;
mod usage;
mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, QueueMode, RecyclingMethod, Runtime,
};
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::ClaimResponse;
use keyflight_store_core::session::PLANNER_SETTINGS;
use tokio_postgres::error::SqlState;

use crate::db::DatabaseUrlError;

pub use batch::{
    BatchKind, BatchLabel, BatchSettings, BatchSizeFamily, BatchSizes, BatchTotals,
    DEFAULT_BATCH_MAX, DEFAULT_BATCH_WORKERS, MAX_BATCH_BYTES,
};
use connection::pg_config;
pub(crate) use connection::{per_host_connect_timeout, tune_tcp};
pub use migrate::{MigrationReport, grant_runtime, migrate};
pub use orphan::MAX_RELEASES_IN_FLIGHT;
pub use partitions::{
    MoveReport, PartitionedReport, RuntimeRole, SLOTS, migrate_partitioned, move_slot, slot_of,
};
use takeover::ReplicaGrace;
pub use usage::Usage;
// The benchmark (`bench/`) runs these exact statements under pgbench as its baseline.
pub use claim::CLAIM_SQL;
pub use dual::BOTH_HELD_SQL;
pub use lease::{FINALIZE_SQL, Released};
pub use records::response_digest;
pub use snapshot::RecordSnapshot;

/// How much longer than `statement_timeout` a call waits for the database's
/// answer before giving up on the connection. The server cancels a slow
/// statement at `statement_timeout` and says so; this margin lets that answer
/// (and the round trip) arrive, so the client-side bound only fires when the
/// server or the network is not answering at all.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(250);

/// Settings for [`Store::connect`], validated by the caller's config layer.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `postgres://…` URL (or libpq key=value string) of the database.
    pub database_url: String,
    /// Maximum pooled connections per replica.
    pub pool_size: usize,
    /// A pooled connection idle this long is closed ([`Store::retire_idle_connections`]).
    pub pool_idle_timeout: Duration,
    /// Retention for claims that do not ask for one (L5).
    pub default_retention: Duration,
    /// Cooldown for `release as: cooldown` without `cooldown_ms` (F6).
    pub default_cooldown: Duration,
    /// Server-side `statement_timeout` on every pooled connection; also bounds
    /// connecting and waiting for a free pooled connection, and (plus
    /// [`ANSWER_MARGIN`]) how long a call waits for the database's answers.
    pub statement_timeout: Duration,
    /// How long after start-up, and after the database answers again following a
    /// failure, no expired pending lease is taken over (`keyflight_store_core::grace`).
    pub takeover_grace: Duration,
    /// How long after a pending lease ran out its winner's outbox may still settle
    /// it: retention cleanup deletes no `pending` row sooner
    /// (`docs/records.md#retention-and-cleanup`).
    pub settle_horizon: Duration,
    /// Group commit of claims and finalizes ([`BatchSettings::OFF`] runs each alone).
    pub batch: BatchSettings,
    /// A partitioned database (`partitions.rs`): `database_url` is its PL/Proxy router, and
    /// these are its partitions (each scope's long-poll wake-ups come from its own). Empty
    /// for one database.
    pub partitions: Vec<String>,
}

/// Why a store call did not complete. `Clone`, so one failed batch can give
/// every item in it the same answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Postgres cannot be reached or did not answer in time (HTTP 503 `journal_unavailable`).
    #[error("the journal database is unavailable: {0}")]
    Unavailable(String),
    /// The database answered that it takes no writes (SQLSTATE 25006): a standby, or a
    /// primary made read-only while it is demoted or fenced. HTTP 503 `journal_unavailable`
    /// like [`StoreError::Unavailable`]; [`Store::run`] also discards the connection, so the
    /// next call connects afresh (with `target_session_attrs=read-write`, to the node that
    /// is primary now) instead of reusing a session that can never write again.
    #[error("the journal database is read-only: {0}")]
    ReadOnly(String),
    /// The claim no longer owns the record (HTTP 409 `lease_lost`).
    #[error("the lease was lost: the record belongs to another claim or is settled")]
    LeaseLost,
    /// No record with that scope (HTTP 404).
    #[error("no such record")]
    NotFound,
    /// Only an `unknown` record can be resolved (HTTP 409 `not_unknown`).
    #[error("the record is not in state unknown")]
    NotUnknown,
    /// A request value the database would reject (HTTP 400); the text is the store's own,
    /// safe to show the caller.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The database refused a request value (SQLSTATE class 22 or 23, HTTP 400). The text
    /// is the database's, which names tables, constraints and values: for the log only.
    #[error("the database refused a request value: {0}")]
    Rejected(String),
}

/// The outcome of one claim attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAttempt {
    /// What to tell the caller.
    pub response: ClaimResponse,
    /// For a same-fingerprint `in_progress` answer: when the winner's lease
    /// runs out, so a long-poll waiter can wake then and steal an abandoned lease.
    pub pending_until: Option<Instant>,
    /// For a `completed` answer: when the record's retention runs out, so the
    /// API can tell an edge how long it may cache the replay (F9).
    pub record_expires_at: Option<Instant>,
    /// For a `won` answer: when the statement that won was sent. Its lease started no
    /// earlier; a reply held back after that (a delayed COMMIT reply) is lease age
    /// (`claimed_after_ms`, `docs/stream-machine.md#the-claim`).
    pub statement_sent: Option<Instant>,
}

/// The lease-store's handle on Postgres. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// See [`StoreSettings::pool_idle_timeout`].
    pool_idle_timeout: Duration,
    default_retention: Duration,
    default_cooldown: Duration,
    /// `statement_timeout` + [`ANSWER_MARGIN`]: the most a call's database work may take.
    answer_timeout: Duration,
    /// Whether expired pending leases may be taken over now.
    grace: Arc<Mutex<ReplicaGrace>>,
    /// [`StoreSettings::settle_horizon`].
    settle_horizon: Duration,
    /// The group-commit queues; `None` when batching is off, and in the handle
    /// the batch workers themselves use (they run what they take alone or as a batch,
    /// never back through a queue).
    batch: Option<Arc<batch::Queues>>,
    /// Sizes of the batches run, for `/metrics`.
    batch_sizes: BatchSizes,
    /// A partitioned database's partitions (`partitions/`), empty for one database: the
    /// database is then their router, and every statement is sent as its routed call
    /// ([`Store::sql`]).
    partitions: Arc<[String]>,
    /// Orphan claims released ([`orphan`]), for `/metrics`.
    orphans_released: prometheus_client::metrics::counter::Counter,
    /// The orphan releases that may retry in the background at once ([`orphan`]).
    orphan_releases: Arc<tokio::sync::Semaphore>,
    /// Lapsed at-most-once leases held as `unknown` (`claim.rs`), for `/metrics`.
    lapses_held: prometheus_client::metrics::counter::Counter,
    /// The probe's query ([`probe::session_settings_sql`]).
    session_settings_sql: Arc<str>,
    /// The last probe found its session without the settings `pg_config` asked for.
    session_settings_missing: Arc<AtomicBool>,
    /// The database probe that feeds the takeover grace; `None` in the handle the probe
    /// and the batch workers use, so it stops with the last handle given out.
    _probe: Option<Arc<probe::Probe>>,
}

impl Store {
    /// Builds the connection pool. Connections are made lazily, so this
    /// succeeds while the database is down (the service starts and `/readyz`
    /// reports not ready); only a malformed URL is an error.
    pub async fn connect(settings: &StoreSettings) -> Result<Store, StoreError> {
        let database = pg_config(&settings.database_url, settings.statement_timeout)?;
        database.warn_if_unverified();
        let manager = Manager::from_config(
            database.config,
            database.tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // The most recently used connection first, as PgBouncer hands out its server
        // connections: one caller's calls stay on one warm backend instead of visiting every
        // connection in turn, and the ones the load does not need go idle and are closed.
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .queue_mode(QueueMode::Lifo)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.statement_timeout))
            .create_timeout(Some(settings.statement_timeout))
            .recycle_timeout(Some(settings.statement_timeout))
            .build()
            .map_err(|e| StoreError::Invalid(format!("database pool: {e}")))?;
        let answer_timeout = settings.statement_timeout.saturating_add(ANSWER_MARGIN);
        let single = Store {
            pool,
            pool_idle_timeout: settings.pool_idle_timeout,
            default_retention: settings.default_retention,
            default_cooldown: settings.default_cooldown,
            answer_timeout,
            grace: Arc::new(Mutex::new(ReplicaGrace::starting(settings.takeover_grace))),
            settle_horizon: settings.settle_horizon,
            partitions: settings.partitions.clone().into(),
            batch: None,
            batch_sizes: BatchSizes::default(),
            orphans_released: prometheus_client::metrics::counter::Counter::default(),
            orphan_releases: Arc::new(tokio::sync::Semaphore::new(orphan::MAX_RELEASES_IN_FLIGHT)),
            lapses_held: prometheus_client::metrics::counter::Counter::default(),
            session_settings_sql: probe::session_settings_sql(settings.statement_timeout).into(),
            session_settings_missing: Arc::default(),
            _probe: None,
        };
        // A queued call waits at most as long as a single call may: for a pooled
        // connection (the pool's wait timeout), then for the database's answer.
        let queue_bound = settings.statement_timeout.saturating_add(answer_timeout);
        let batch = batch::Queues::start(&single, &settings.batch, queue_bound);
        Ok(Store {
            batch,
            _probe: Some(probe::Probe::start(&single)),
            ..single
        })
    }

    /// Whether the database probe last found its pooled session without the settings
    /// every connection asks for (`/metrics`, `docs/configuration.md#the-connection-pool`).
    pub fn session_settings_missing(&self) -> bool {
        self.session_settings_missing.load(Ordering::Relaxed)
    }

    /// Sizes of the claim and finalize batches this store ran (`/metrics`).
    pub fn batch_sizes(&self) -> &BatchSizes {
        &self.batch_sizes
    }

    /// Calls of `kind` queued for a batch worker right now (`/metrics`); 0 when batching is off.
    pub fn batch_queued(&self, kind: BatchKind) -> usize {
        self.batch.as_ref().map_or(0, |queues| queues.queued(kind))
    }

    /// When this replica resumes taking over expired pending leases, or `None`
    /// if it may now.
    pub fn takeovers_held_until(&self) -> Option<Instant> {
        self.grace
            .lock()
            .map_or(None, |grace| grace.held_until(Instant::now()))
    }

    /// `Ok` when the database answers and its schema is at or past the newest
    /// migration embedded in this binary (L8 `/readyz`).
    pub async fn readiness(&self) -> Result<(), StoreError> {
        let partitioned = self.partitioned();
        self.run(async |client| match partitioned {
            true => partitions::check_router(client).await,
            false => migrate::check_current(client).await,
        })
        .await
    }

    /// Whether the database is a partitioned one's router.
    fn partitioned(&self) -> bool {
        !self.partitions.is_empty()
    }

    /// The statement as this store's database runs it: itself, or on a partitioned
    /// database its router's call.
    fn sql(&self, statement: &'static partitions::Routed) -> &'static str {
        match self.partitioned() {
            true => statement.call(),
            false => statement.sql,
        }
    }

    /// Pool gauges for `/metrics`.
    pub fn pool_status(&self) -> deadpool_postgres::Status {
        self.pool.status()
    }

    /// `statement_timeout` + [`ANSWER_MARGIN`]: the most a call's database work may take,
    /// and so the longest a call waits for its place in the pool (`crate::shares`).
    pub fn answer_timeout(&self) -> Duration {
        self.answer_timeout
    }

    /// Runs one call's database work on a pooled connection, bounded by
    /// `statement_timeout` + [`ANSWER_MARGIN`].
    ///
    /// When the bound runs out, the database did not answer (frozen, or the
    /// network is gone): the connection is taken out of the pool and dropped,
    /// because a request is still in flight on it and the next caller would
    /// wait behind it; the call is `Unavailable`. A connection whose database
    /// answered read-only ([`StoreError::ReadOnly`]) is dropped the same way: it
    /// is on a node that is no longer the primary (one fenced read-only while it
    /// is demoted, or a standby reached without `target_session_attrs=read-write`),
    /// and the pool's recycling only notices connections that are closed.
    ///
    /// Every outcome feeds the takeover grace: a failure marks the database
    /// failing, and the first answer after failures (the new primary, after a
    /// failover) starts a new grace.
    async fn run<T>(
        &self,
        work: impl AsyncFnOnce(&Object) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = match self.client().await {
            Ok(client) => match tokio::time::timeout(self.answer_timeout, work(&client)).await {
                Ok(result) => {
                    if matches!(result, Err(StoreError::ReadOnly(_))) {
                        drop(Object::take(client));
                    }
                    result
                }
                Err(_elapsed) => {
                    drop(Object::take(client));
                    Err(StoreError::Unavailable(format!(
                        "the database did not answer within {} ms; connection discarded",
                        self.answer_timeout.as_millis()
                    )))
                }
            },
            Err(e) => Err(e),
        };
        if let Ok(mut grace) = self.grace.lock() {
            match &result {
                Err(StoreError::Unavailable(_) | StoreError::ReadOnly(_)) => grace.failed(),
                _ => grace.answered(Instant::now()),
            }
        }
        result
    }

    /// A pooled connection, or `Unavailable` when none can be had in time.
    async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::from(e),
            other => StoreError::Unavailable(format!("connection pool: {other}")),
        })
    }
}

/// A database URL that cannot be used is a setting to fix, not an outage.
impl From<DatabaseUrlError> for StoreError {
    fn from(e: DatabaseUrlError) -> Self {
        StoreError::Invalid(format!("database url: {e}"))
    }
}

/// Failing closed: data errors (class 22) and constraint violations (class
/// 23) come from request values and are the caller's fault; a read-only
/// answer (25006) means this connection is on a node that is not the primary;
/// everything else means the journal cannot do its job right now.
impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if let Some(db) = e.as_db_error() {
            let code = db.code();
            let message = format!("{}: {}", code.code(), db.message());
            return if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
                StoreError::ReadOnly(message)
            } else if code.code().starts_with("22") || code.code().starts_with("23") {
                StoreError::Rejected(message)
            } else {
                StoreError::Unavailable(message)
            };
        }
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        StoreError::Unavailable(message)
    }
}

/// Converts a request's millisecond count to the `bigint` the SQL expects.
fn millis_param(name: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{name} is out of range")))
}

/// Converts a duration to whole milliseconds for SQL, saturating.
fn duration_millis(d: Duration) -> i64 {
    i64::try_from(millis(d)).unwrap_or(i64::MAX)
}
