//! The flags and environment variables of `serve`, `migrate`, `move-slot` and `records`,
//! declared with clap; [`super::serve`] turns `serve`'s into validated settings.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use ipnet::IpNet;
use keyflight_protocol::time::parse_duration;

use super::{ConfigError, Secret, resolve_secret};

/// `--header-read-timeout` unless set: also how long the store keeps an idle keep-alive
/// connection, so every shipped proxy in front of the store closes its idle connections
/// sooner (`docs/configuration.md#limits`).
pub const DEFAULT_HEADER_READ_TIMEOUT: &str = "10s";

/// Where the database is (`serve`, `migrate`).
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// Postgres connection URL (`postgres://user:pass@host:port/db`); with partitions, the
    /// PL/Proxy router's.
    #[arg(long, env = "KEYFLIGHT_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// A partition of a partitioned database, once per partition in slot order (comma
    /// separated in the environment): `--database-url` is then their PL/Proxy router
    /// (`docs/distributed-sql.md#plproxy-partitioned-postgres`).
    #[arg(
        long = "partition-url",
        env = "KEYFLIGHT_PARTITION_URLS",
        value_delimiter = ',',
        hide_env_values = true,
        value_name = "URL"
    )]
    pub partition_urls: Vec<String>,
}

/// Flags and environment of `lease-store migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// The schema owner's database URL.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// After migrating, give this role exactly what `serve` needs and nothing more (no DDL,
    /// no writes to the migration history or the epoch, the audit append-only), revoking
    /// anything broader; run as the schema owner, with the runtime role's name.
    #[arg(long, env = "KEYFLIGHT_GRANT_RUNTIME", value_name = "ROLE")]
    pub grant_runtime: Option<String>,
    /// With partitions and `--grant-runtime`: the runtime role's password on the
    /// partitions, which their router's PL/Proxy connects with (none: they trust the role
    /// or check its certificate).
    #[arg(
        long,
        env = "KEYFLIGHT_RUNTIME_PASSWORD",
        hide_env_values = true,
        requires = "grant_runtime"
    )]
    pub runtime_password: Option<String>,
}

/// Flags and environment of `lease-store move-slot`.
#[derive(Debug, Clone, Args)]
pub struct MoveSlotArgs {
    /// The router's and the partitions' URLs, as the schema owner (as for `migrate`).
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// The slot to move (0 to 63).
    #[arg(long)]
    pub slot: usize,
    /// The partition to move it to: its place in the `--partition-url` list, from 0.
    #[arg(long)]
    pub to: usize,
    /// How long to wait after parking the slot for calls already routed to its old
    /// partition to end: the stores' `--statement-timeout` and a margin.
    #[arg(long, default_value = "6s", value_parser = parse_duration)]
    pub drain: Duration,
}

/// The admin token, inline or as a file (`records …`, and part of `serve`).
#[derive(Debug, Clone, Args)]
pub struct AdminTokenArgs {
    /// Admin token for `/v1/records…` (prefer the env var or a file: flags show in `ps`).
    #[arg(long, env = "KEYFLIGHT_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// File holding the admin token (a trailing newline is ignored).
    #[arg(long, env = "KEYFLIGHT_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
}

impl AdminTokenArgs {
    /// The admin token, if one was given.
    pub fn resolve(&self) -> Result<Option<Secret>, ConfigError> {
        resolve_secret(
            "KEYFLIGHT_ADMIN_TOKEN",
            self.admin_token.as_deref(),
            self.admin_token_file.as_deref(),
        )
    }
}

/// Flags and environment of `lease-store serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub(super) database: DatabaseArgs,
    /// Address to listen on.
    #[arg(long, env = "KEYFLIGHT_LISTEN", default_value = "127.0.0.1:8480")]
    pub(super) listen: SocketAddr,
    /// Bearer token the edge filter uses for `/v1/claims…` (prefer the env var or a file).
    #[arg(long, env = "KEYFLIGHT_TOKEN", hide_env_values = true)]
    pub(super) token: Option<String>,
    /// File holding the filter tokens, one per line (current and next during a
    /// rotation), re-read when it changes.
    #[arg(long, env = "KEYFLIGHT_TOKEN_FILE")]
    pub(super) token_file: Option<PathBuf>,
    /// Authenticate data-plane callers by the SPIFFE id their mesh proxy puts in
    /// `x-forwarded-client-cert`, believed only from `--xfcc-trusted-peers`; only
    /// `--workload`s may call, and each reaches only its own records.
    #[arg(long, env = "KEYFLIGHT_TRUST_XFCC")]
    pub(super) trust_xfcc: bool,
    /// Peer addresses (CIDRs, comma-separated) whose `x-forwarded-client-cert` is
    /// believed: the store's own sidecar, which connects from `127.0.0.6` (Istio's
    /// `REDIRECT` mode, `crate::caller::SIDECAR_ADDRESSES`); a wider range is warned about.
    #[arg(
        long,
        env = "KEYFLIGHT_XFCC_TRUSTED_PEERS",
        value_delimiter = ',',
        default_value = "127.0.0.6/32,::6/128"
    )]
    pub(super) xfcc_trusted_peers: Vec<IpNet>,
    /// A SPIFFE id allowed to call the data plane under `--trust-xfcc` (repeatable;
    /// the variable takes a comma-separated list).
    #[arg(long = "workload", env = "KEYFLIGHT_WORKLOADS", value_delimiter = ',')]
    pub(super) workloads: Vec<String>,
    /// A file of SPIFFE ids allowed under `--trust-xfcc`, one a line, re-read when it
    /// changes (instead of `--workload`).
    #[arg(long, env = "KEYFLIGHT_WORKLOADS_FILE")]
    pub(super) workloads_file: Option<PathBuf>,
    /// While switching an installation to `--trust-xfcc`: a workload's claims also claim
    /// the scope as sent, in the shared namespace of bearer callers, and its settles
    /// settle that record too, so a retry on either side of the switch runs once.
    #[arg(long, env = "KEYFLIGHT_NAMESPACE_TRANSITION", requires = "trust_xfcc")]
    pub(super) namespace_transition: bool,
    #[command(flatten)]
    pub(super) admin: AdminTokenArgs,
    /// Operators' named admin tokens, one `name:token` per line, re-read when the file
    /// changes; the name is who the audit says erased or resolved a record.
    #[arg(long, env = "KEYFLIGHT_ADMIN_TOKENS_FILE")]
    pub(super) admin_tokens_file: Option<PathBuf>,
    /// Address the admin API (`/v1/records…`) listens on, apart from the data plane;
    /// loopback by default, so operators reach it from inside the pod (`kubectl exec`,
    /// `port-forward`). Not bound when no admin token is configured.
    #[arg(long, env = "KEYFLIGHT_ADMIN_LISTEN", default_value = "127.0.0.1:9480")]
    pub(super) admin_listen: SocketAddr,
    /// Serve over a database URL that lets the connection run in cleartext (`sslmode`
    /// `disable`, or `prefer`, the default when none is given); without it such a URL stops
    /// the start (`docs/configuration.md#tls-to-postgres`).
    #[arg(long, env = "KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE")]
    pub(super) allow_plaintext_database: bool,
    /// Run pending migrations before serving (default: a separate `migrate` job does it).
    #[arg(long, env = "KEYFLIGHT_MIGRATE")]
    pub(super) migrate: bool,
    /// Refuse to start when the database role can do more than serving needs (owns the
    /// schema, may create objects, may change the migration history, the epoch or the
    /// audit); without it such a role only gets a warning at start.
    #[arg(long, env = "KEYFLIGHT_REQUIRE_LEAST_PRIVILEGE")]
    pub(super) require_least_privilege: bool,
    /// Threads that run the replica's tasks; by default one per core the process may use
    /// (`docs/configuration.md#worker-threads`).
    #[arg(long, env = "KEYFLIGHT_WORKER_THREADS")]
    pub(super) worker_threads: Option<NonZeroUsize>,
    /// Postgres connections per replica.
    #[arg(long, env = "KEYFLIGHT_POOL_SIZE", default_value_t = 16)]
    pub(super) pool_size: usize,
    /// A pooled connection idle this long is closed; keep it below any idle cut-off between
    /// the replica and Postgres (a firewall's, `idle_session_timeout`).
    #[arg(long, env = "KEYFLIGHT_POOL_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub(super) pool_idle_timeout: Duration,
    /// Record retention when a claim does not say (e.g. `24h`).
    #[arg(long, env = "KEYFLIGHT_DEFAULT_RETENTION", default_value = "24h", value_parser = parse_duration)]
    pub(super) default_retention: Duration,
    /// Failure cooldown when a release does not say (e.g. `2s`).
    #[arg(long, env = "KEYFLIGHT_DEFAULT_COOLDOWN", default_value = "2s", value_parser = parse_duration)]
    pub(super) default_cooldown: Duration,
    /// Postgres `statement_timeout` for every query; a call whose database
    /// gives no answer within it (plus 250 ms) fails with 503.
    #[arg(long, env = "KEYFLIGHT_STATEMENT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub(super) statement_timeout: Duration,
    /// After start-up, and after the database answers again following a failure, take
    /// over no expired pending lease for this long: its winner may be alive, with the
    /// record in its outbox, and resend it once the store answers (`0s` disables).
    #[arg(long, env = "KEYFLIGHT_TAKEOVER_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub(super) takeover_grace: Duration,
    /// Retention clean-up deletes a `pending` record only once its lease ran out this
    /// long ago: until then its winner's outbox may still deliver the record. Keep it
    /// above the filter's longest `record_retry_budget_ms` plus the longest upstream run.
    #[arg(long, env = "KEYFLIGHT_SETTLE_HORIZON", default_value = "1h", value_parser = parse_duration)]
    pub(super) settle_horizon: Duration,
    /// Upper bound on a claim's `wait_ms` (longer waits are shortened to this).
    #[arg(long, env = "KEYFLIGHT_MAX_WAIT", default_value = "30s", value_parser = parse_duration)]
    pub(super) max_wait: Duration,
    /// Long-polls parked on one scope at once; past it a follower is answered
    /// `in_progress` at once.
    #[arg(long, env = "KEYFLIGHT_MAX_WAITERS_PER_SCOPE", default_value_t = crate::longpoll::DEFAULT_MAX_WAITERS_PER_SCOPE)]
    pub(super) max_waiters_per_scope: usize,
    /// Long-polls parked in this replica at once; past it a follower is answered
    /// `in_progress` at once.
    #[arg(long, env = "KEYFLIGHT_MAX_WAITERS", default_value_t = crate::longpoll::DEFAULT_MAX_WAITERS)]
    pub(super) max_waiters: usize,
    /// Largest request body accepted, in bytes (a finalize carries the response body).
    #[arg(long, env = "KEYFLIGHT_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub(super) max_body_bytes: usize,
    /// Longest retention a claim may ask for (longer ones are refused with 400); at most
    /// ten years, the longest a filter policy may ask for.
    #[arg(long, env = "KEYFLIGHT_MAX_RETENTION", default_value = "3650d", value_parser = parse_duration)]
    pub(super) max_retention: Duration,
    /// Largest response body a finalize or resolve may record, in bytes (larger: 413);
    /// default: the largest a `--max-body-bytes` finalize can carry.
    #[arg(long, env = "KEYFLIGHT_MAX_RECORD_BYTES")]
    pub(super) max_record_bytes: Option<usize>,
    /// Request body bytes all calls may have in flight at once (declared sizes); a call
    /// past it is answered 503 before its body is read.
    #[arg(long, env = "KEYFLIGHT_MAX_BODY_BYTES_IN_FLIGHT", default_value_t = 64 * 1024 * 1024)]
    pub(super) max_body_bytes_in_flight: usize,
    /// The share of `--max-body-bytes-in-flight` one caller (one workload under
    /// `--trust-xfcc`, else one peer address) may hold.
    #[arg(long, env = "KEYFLIGHT_MAX_BODY_BYTES_IN_FLIGHT_PER_CALLER", default_value_t = 16 * 1024 * 1024)]
    pub(super) max_body_bytes_in_flight_per_caller: usize,
    /// Answer bytes all calls may have built and not yet handed to their connections; a call
    /// whose answer would pass it is answered 503 instead.
    #[arg(long, env = "KEYFLIGHT_MAX_ANSWER_BYTES_IN_FLIGHT", default_value_t = 64 * 1024 * 1024)]
    pub(super) max_answer_bytes_in_flight: usize,
    /// The share of `--max-answer-bytes-in-flight` one caller (as for the body budget) may
    /// hold.
    #[arg(long, env = "KEYFLIGHT_MAX_ANSWER_BYTES_IN_FLIGHT_PER_CALLER", default_value_t = 16 * 1024 * 1024)]
    pub(super) max_answer_bytes_in_flight_per_caller: usize,
    /// Answer bytes a second shared by the callers while more than one is active: each
    /// caller's answers are paced to its equal share (`0` paces nobody).
    #[arg(long, env = "KEYFLIGHT_MAX_ANSWER_BYTES_PER_SECOND", default_value_t = 64 * 1024 * 1024)]
    pub(super) max_answer_bytes_per_second: u64,
    /// A connection whose reader takes none of an answer for this long is closed.
    #[arg(long, env = "KEYFLIGHT_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub(super) write_timeout: Duration,
    /// A connection that has not sent a complete request head this long after it opened,
    /// or after its previous answer, is closed (it also ends idle keep-alive connections).
    #[arg(long, env = "KEYFLIGHT_HEADER_READ_TIMEOUT", default_value = DEFAULT_HEADER_READ_TIMEOUT, value_parser = parse_duration)]
    pub(super) header_read_timeout: Duration,
    /// A call must be read and answered within this long, else 503 (a long-poll gets its
    /// wait on top).
    #[arg(long, env = "KEYFLIGHT_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub(super) request_timeout: Duration,
    /// Connections served at once; one past it is closed as soon as it is accepted.
    #[arg(long, env = "KEYFLIGHT_MAX_CONNECTIONS", default_value_t = 1024)]
    pub(super) max_connections: usize,
    /// `/v1` calls running at once (a parked long-poll does not count); past it a call
    /// is answered 503 with `Retry-After` at once.
    #[arg(long, env = "KEYFLIGHT_MAX_CONCURRENT_REQUESTS", default_value_t = 256)]
    pub(super) max_concurrent_requests: usize,
    /// Records one workload may keep (`docs/records.md#storage-quota`); past it, a claim that
    /// would add a record is answered 507 `storage_quota`.
    #[arg(
        long,
        env = "KEYFLIGHT_STORAGE_QUOTA_RECORDS",
        default_value_t = 50_000_000
    )]
    pub(super) storage_quota_records: u64,
    /// Recorded response bytes one workload may keep; past it, as for records.
    #[arg(long, env = "KEYFLIGHT_STORAGE_QUOTA_BYTES", default_value_t = 64 * 1024 * 1024 * 1024)]
    pub(super) storage_quota_bytes: u64,
    /// How often each replica measures every workload's records (one aggregate over the
    /// table); a workload may pass its quota by what it claims within one interval.
    #[arg(long, env = "KEYFLIGHT_STORAGE_QUOTA_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub(super) storage_quota_interval: Duration,
    /// How often retention clean-up runs.
    #[arg(long, env = "KEYFLIGHT_CLEANUP_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub(super) cleanup_interval: Duration,
    /// Rows deleted per clean-up batch.
    #[arg(long, env = "KEYFLIGHT_CLEANUP_BATCH", default_value_t = 1000)]
    pub(super) cleanup_batch: i64,
    /// Group commit: worker tasks per kind (claims, finalizes), each running one
    /// batch statement at a time on a pooled connection.
    #[arg(long, env = "KEYFLIGHT_BATCH_WORKERS", default_value_t = crate::store::DEFAULT_BATCH_WORKERS)]
    pub(super) batch_workers: usize,
    /// Group commit: most claims (or finalizes) already queued together that run as one
    /// statement; `1` turns batching off (every call is its own statement).
    #[arg(long, env = "KEYFLIGHT_BATCH_MAX", default_value_t = crate::store::DEFAULT_BATCH_MAX)]
    pub(super) batch_max: usize,
}
