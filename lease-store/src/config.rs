//! Settings for `serve` and `migrate`, parsed once at start-up (`docs/records.md#the-api`).
//!
//! Flags and environment variables are declared here with clap (`ServeArgs`,
//! `MigrateArgs`, `DatabaseArgs`, `AdminTokenArgs`), then turned into validated types
//! ([`ServeConfig`], [`Secret`]) before anything starts: a missing token, a
//! token file that cannot be read or an admin token equal to the filter's
//! fails the process with one clear line, and the request path never
//! re-checks a setting.
//!
//! Every token can be given inline (`KEYFLIGHT_TOKEN`) or as a file
//! (`KEYFLIGHT_TOKEN_FILE`, the shape Kubernetes secrets mount as); giving
//! both is an error rather than a silent precedence rule. The filter's token file is a
//! set, reloaded when it changes ([`crate::token_set`]); the mesh identity
//! (`--trust-xfcc`, [`crate::caller`]) is the other caller credential, and each one
//! configured is required.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use ipnet::IpNet;
use keyflight_protocol::time::parse_duration;
use keyflight_protocol::wire::MAX_RETENTION_S;

use crate::admin_tokens::AdminTokens;
use crate::caller::MeshIdentity;
use crate::cleanup::CleanupSettings;
use crate::longpoll::WaiterCaps;
use crate::quota::QuotaSettings;
use crate::store::{BatchSettings, StoreSettings};
use crate::token_set::TokenSet;
use crate::workloads::Allowlist;

/// `--header-read-timeout` unless set: also how long the store keeps an idle keep-alive
/// connection, so every shipped proxy in front of the store closes its idle connections
/// sooner (`docs/configuration.md#limits`).
pub const DEFAULT_HEADER_READ_TIMEOUT: &str = "10s";

/// Why the settings cannot be used. Each message names the flag or variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `serve` was started with no way to authenticate the filter.
    #[error(
        "no caller credential configured: set KEYFLIGHT_TOKEN or KEYFLIGHT_TOKEN_FILE (or --token / --token-file), or --trust-xfcc with --workload or --workloads-file"
    )]
    MissingToken,
    /// The filter token file does not parse (the reason names the line, never a token).
    #[error("token file {}: {reason}", path.display())]
    TokenFile {
        /// The file given.
        path: PathBuf,
        /// What is wrong, by line.
        reason: String,
    },
    /// The `--workload` list is unusable.
    #[error("invalid --workload: {reason}")]
    Workloads {
        /// What is wrong.
        reason: String,
    },
    /// The workloads file cannot be read or does not parse.
    #[error("workloads file {}: {reason}", path.display())]
    WorkloadsFile {
        /// The file given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Both the inline and the file form of a secret were given.
    #[error("{name} is set both inline and as a file; set only one")]
    SecretGivenTwice {
        /// The variable's name.
        name: &'static str,
    },
    /// A secret file could not be read.
    #[error("cannot read {name} from {}: {source}", path.display())]
    SecretFile {
        /// The variable's name.
        name: &'static str,
        /// The file given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A secret is empty (after trimming the trailing newline of a file).
    #[error("{name} is empty")]
    EmptySecret {
        /// The variable's name.
        name: &'static str,
    },
    /// An admin token equals the filter token, so the filter could call admin endpoints.
    #[error(
        "every admin token (KEYFLIGHT_ADMIN_TOKEN, KEYFLIGHT_ADMIN_TOKENS_FILE) must differ from KEYFLIGHT_TOKEN"
    )]
    AdminTokenReused,
    /// The admin token file does not parse (the reason names the line, never a token).
    #[error("admin token file {}: {reason}", path.display())]
    AdminTokensFile {
        /// The file given.
        path: PathBuf,
        /// What is wrong, by line.
        reason: String,
    },
    /// A database URL lets the store's connection run in cleartext.
    #[error(
        "{setting} has sslmode={mode}, which lets the connection to Postgres run in cleartext: \
         use sslmode=verify-full with sslrootcert, or pass --allow-plaintext-database \
         (KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE) on a network you trust \
         (docs/configuration.md#tls-to-postgres)"
    )]
    CleartextDatabase {
        /// The flag and variable of the URL.
        setting: &'static str,
        /// Its `sslmode` (`prefer` when it gives none).
        mode: &'static str,
    },
    /// A tunable is out of range.
    #[error("invalid --{flag}: {reason}")]
    Invalid {
        /// The flag at fault.
        flag: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A bearer token. Its `Debug` form never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a token value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The token's bytes, for constant-time comparison and for sending.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

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
    database: DatabaseArgs,
    /// Address to listen on.
    #[arg(long, env = "KEYFLIGHT_LISTEN", default_value = "127.0.0.1:8480")]
    listen: SocketAddr,
    /// Bearer token the edge filter uses for `/v1/claims…` (prefer the env var or a file).
    #[arg(long, env = "KEYFLIGHT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// File holding the filter tokens, one per line (current and next during a
    /// rotation), re-read when it changes.
    #[arg(long, env = "KEYFLIGHT_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Authenticate data-plane callers by the SPIFFE id their mesh proxy puts in
    /// `x-forwarded-client-cert`, believed only from `--xfcc-trusted-peers`; only
    /// `--workload`s may call, and each reaches only its own records.
    #[arg(long, env = "KEYFLIGHT_TRUST_XFCC")]
    trust_xfcc: bool,
    /// Peer addresses (CIDRs, comma-separated) whose `x-forwarded-client-cert` is
    /// believed: the store's own sidecar, which connects from `127.0.0.6` (Istio's
    /// `REDIRECT` mode, `crate::caller::SIDECAR_ADDRESSES`); a wider range is warned about.
    #[arg(
        long,
        env = "KEYFLIGHT_XFCC_TRUSTED_PEERS",
        value_delimiter = ',',
        default_value = "127.0.0.6/32,::6/128"
    )]
    xfcc_trusted_peers: Vec<IpNet>,
    /// A SPIFFE id allowed to call the data plane under `--trust-xfcc` (repeatable;
    /// the variable takes a comma-separated list).
    #[arg(long = "workload", env = "KEYFLIGHT_WORKLOADS", value_delimiter = ',')]
    workloads: Vec<String>,
    /// A file of SPIFFE ids allowed under `--trust-xfcc`, one a line, re-read when it
    /// changes (instead of `--workload`).
    #[arg(long, env = "KEYFLIGHT_WORKLOADS_FILE")]
    workloads_file: Option<PathBuf>,
    /// While switching an installation to `--trust-xfcc`: a workload's claims also claim
    /// the scope as sent, in the shared namespace of bearer callers, and its settles
    /// settle that record too, so a retry on either side of the switch runs once.
    #[arg(long, env = "KEYFLIGHT_NAMESPACE_TRANSITION", requires = "trust_xfcc")]
    namespace_transition: bool,
    #[command(flatten)]
    admin: AdminTokenArgs,
    /// Operators' named admin tokens, one `name:token` per line, re-read when the file
    /// changes; the name is who the audit says erased or resolved a record.
    #[arg(long, env = "KEYFLIGHT_ADMIN_TOKENS_FILE")]
    admin_tokens_file: Option<PathBuf>,
    /// Address the admin API (`/v1/records…`) listens on, apart from the data plane;
    /// loopback by default, so operators reach it from inside the pod (`kubectl exec`,
    /// `port-forward`). Not bound when no admin token is configured.
    #[arg(long, env = "KEYFLIGHT_ADMIN_LISTEN", default_value = "127.0.0.1:9480")]
    admin_listen: SocketAddr,
    /// Serve over a database URL that lets the connection run in cleartext (`sslmode`
    /// `disable`, or `prefer`, the default when none is given); without it such a URL stops
    /// the start (`docs/configuration.md#tls-to-postgres`).
    #[arg(long, env = "KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE")]
    allow_plaintext_database: bool,
    /// Run pending migrations before serving (default: a separate `migrate` job does it).
    #[arg(long, env = "KEYFLIGHT_MIGRATE")]
    migrate: bool,
    /// Refuse to start when the database role can do more than serving needs (owns the
    /// schema, may create objects, may change the migration history, the epoch or the
    /// audit); without it such a role only gets a warning at start.
    #[arg(long, env = "KEYFLIGHT_REQUIRE_LEAST_PRIVILEGE")]
    require_least_privilege: bool,
    /// Threads that run the replica's tasks; by default one per core the process may use
    /// (`docs/configuration.md#worker-threads`).
    #[arg(long, env = "KEYFLIGHT_WORKER_THREADS")]
    worker_threads: Option<NonZeroUsize>,
    /// Postgres connections per replica.
    #[arg(long, env = "KEYFLIGHT_POOL_SIZE", default_value_t = 16)]
    pool_size: usize,
    /// A pooled connection idle this long is closed; keep it below any idle cut-off between
    /// the replica and Postgres (a firewall's, `idle_session_timeout`).
    #[arg(long, env = "KEYFLIGHT_POOL_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pool_idle_timeout: Duration,
    /// Record retention when a claim does not say (e.g. `24h`).
    #[arg(long, env = "KEYFLIGHT_DEFAULT_RETENTION", default_value = "24h", value_parser = parse_duration)]
    default_retention: Duration,
    /// Failure cooldown when a release does not say (e.g. `2s`).
    #[arg(long, env = "KEYFLIGHT_DEFAULT_COOLDOWN", default_value = "2s", value_parser = parse_duration)]
    default_cooldown: Duration,
    /// Postgres `statement_timeout` for every query; a call whose database
    /// gives no answer within it (plus 250 ms) fails with 503.
    #[arg(long, env = "KEYFLIGHT_STATEMENT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    statement_timeout: Duration,
    /// After start-up, and after the database answers again following a failure, take
    /// over no expired pending lease for this long: its winner may be alive, with the
    /// record in its outbox, and resend it once the store answers (`0s` disables).
    #[arg(long, env = "KEYFLIGHT_TAKEOVER_GRACE", default_value = "5s", value_parser = parse_duration)]
    takeover_grace: Duration,
    /// Retention clean-up deletes a `pending` record only once its lease ran out this
    /// long ago: until then its winner's outbox may still deliver the record. Keep it
    /// above the filter's longest `record_retry_budget_ms` plus the longest upstream run.
    #[arg(long, env = "KEYFLIGHT_SETTLE_HORIZON", default_value = "1h", value_parser = parse_duration)]
    settle_horizon: Duration,
    /// Upper bound on a claim's `wait_ms` (longer waits are shortened to this).
    #[arg(long, env = "KEYFLIGHT_MAX_WAIT", default_value = "30s", value_parser = parse_duration)]
    max_wait: Duration,
    /// Long-polls parked on one scope at once; past it a follower is answered
    /// `in_progress` at once.
    #[arg(long, env = "KEYFLIGHT_MAX_WAITERS_PER_SCOPE", default_value_t = crate::longpoll::DEFAULT_MAX_WAITERS_PER_SCOPE)]
    max_waiters_per_scope: usize,
    /// Long-polls parked in this replica at once; past it a follower is answered
    /// `in_progress` at once.
    #[arg(long, env = "KEYFLIGHT_MAX_WAITERS", default_value_t = crate::longpoll::DEFAULT_MAX_WAITERS)]
    max_waiters: usize,
    /// Largest request body accepted, in bytes (a finalize carries the response body).
    #[arg(long, env = "KEYFLIGHT_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Longest retention a claim may ask for (longer ones are refused with 400); at most
    /// ten years, the longest a filter policy may ask for.
    #[arg(long, env = "KEYFLIGHT_MAX_RETENTION", default_value = "3650d", value_parser = parse_duration)]
    max_retention: Duration,
    /// Largest response body a finalize or resolve may record, in bytes (larger: 413);
    /// default: the largest a `--max-body-bytes` finalize can carry.
    #[arg(long, env = "KEYFLIGHT_MAX_RECORD_BYTES")]
    max_record_bytes: Option<usize>,
    /// Request body bytes all calls may have in flight at once (declared sizes); a call
    /// past it is answered 503 before its body is read.
    #[arg(long, env = "KEYFLIGHT_MAX_BODY_BYTES_IN_FLIGHT", default_value_t = 64 * 1024 * 1024)]
    max_body_bytes_in_flight: usize,
    /// The share of `--max-body-bytes-in-flight` one caller (one workload under
    /// `--trust-xfcc`, else one peer address) may hold.
    #[arg(long, env = "KEYFLIGHT_MAX_BODY_BYTES_IN_FLIGHT_PER_CALLER", default_value_t = 16 * 1024 * 1024)]
    max_body_bytes_in_flight_per_caller: usize,
    /// Answer bytes all calls may have built and not yet handed to their connections; a call
    /// whose answer would pass it is answered 503 instead.
    #[arg(long, env = "KEYFLIGHT_MAX_ANSWER_BYTES_IN_FLIGHT", default_value_t = 64 * 1024 * 1024)]
    max_answer_bytes_in_flight: usize,
    /// The share of `--max-answer-bytes-in-flight` one caller (as for the body budget) may
    /// hold.
    #[arg(long, env = "KEYFLIGHT_MAX_ANSWER_BYTES_IN_FLIGHT_PER_CALLER", default_value_t = 16 * 1024 * 1024)]
    max_answer_bytes_in_flight_per_caller: usize,
    /// A connection whose reader takes none of an answer for this long is closed.
    #[arg(long, env = "KEYFLIGHT_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    write_timeout: Duration,
    /// A connection that has not sent a complete request head this long after it opened,
    /// or after its previous answer, is closed (it also ends idle keep-alive connections).
    #[arg(long, env = "KEYFLIGHT_HEADER_READ_TIMEOUT", default_value = DEFAULT_HEADER_READ_TIMEOUT, value_parser = parse_duration)]
    header_read_timeout: Duration,
    /// A call must be read and answered within this long, else 503 (a long-poll gets its
    /// wait on top).
    #[arg(long, env = "KEYFLIGHT_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Connections served at once; one past it is closed as soon as it is accepted.
    #[arg(long, env = "KEYFLIGHT_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// `/v1` calls running at once (a parked long-poll does not count); past it a call
    /// is answered 503 with `Retry-After` at once.
    #[arg(long, env = "KEYFLIGHT_MAX_CONCURRENT_REQUESTS", default_value_t = 256)]
    max_concurrent_requests: usize,
    /// Records one workload may keep (`docs/records.md#storage-quota`); past it, a claim that
    /// would add a record is answered 507 `storage_quota`.
    #[arg(
        long,
        env = "KEYFLIGHT_STORAGE_QUOTA_RECORDS",
        default_value_t = 50_000_000
    )]
    storage_quota_records: u64,
    /// Recorded response bytes one workload may keep; past it, as for records.
    #[arg(long, env = "KEYFLIGHT_STORAGE_QUOTA_BYTES", default_value_t = 64 * 1024 * 1024 * 1024)]
    storage_quota_bytes: u64,
    /// How often each replica measures every workload's records (one aggregate over the
    /// table); a workload may pass its quota by what it claims within one interval.
    #[arg(long, env = "KEYFLIGHT_STORAGE_QUOTA_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    storage_quota_interval: Duration,
    /// How often retention clean-up runs.
    #[arg(long, env = "KEYFLIGHT_CLEANUP_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    cleanup_interval: Duration,
    /// Rows deleted per clean-up batch.
    #[arg(long, env = "KEYFLIGHT_CLEANUP_BATCH", default_value_t = 1000)]
    cleanup_batch: i64,
    /// Group commit: worker tasks per kind (claims, finalizes), each running one
    /// batch statement at a time on a pooled connection.
    #[arg(long, env = "KEYFLIGHT_BATCH_WORKERS", default_value_t = crate::store::DEFAULT_BATCH_WORKERS)]
    batch_workers: usize,
    /// Group commit: most claims (or finalizes) already queued together that run as one
    /// statement; `1` turns batching off (every call is its own statement).
    #[arg(long, env = "KEYFLIGHT_BATCH_MAX", default_value_t = crate::store::DEFAULT_BATCH_MAX)]
    batch_max: usize,
}

/// Who may call what (L7): the filter's credentials and the operators' named tokens.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// Tokens for `/v1/claims…`, when a bearer token is required there.
    pub filter: Option<Arc<TokenSet>>,
    /// The callers' mesh identity, when the store trusts its sidecar's XFCC.
    pub mesh: Option<Arc<MeshIdentity>>,
    /// Operators' tokens for `/v1/records…`; empty disables the admin API.
    pub admin: Arc<AdminTokens>,
}

/// How much of the replica one client, or all of them, may hold
/// (`docs/configuration.md#limits`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time for a connection to send a complete request head.
    pub header_read_timeout: Duration,
    /// Time to read and answer one call (a long-poll's wait comes on top).
    pub request_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// `/v1` calls running at once.
    pub max_concurrent_requests: usize,
    /// Request body bytes in flight, all callers together.
    pub max_body_bytes_in_flight: usize,
    /// Request body bytes in flight, one caller.
    pub max_body_bytes_in_flight_per_caller: usize,
    /// Answer bytes not yet handed to the connections, all callers together.
    pub max_answer_bytes_in_flight: usize,
    /// Answer bytes not yet handed to the connections, one caller.
    pub max_answer_bytes_in_flight_per_caller: usize,
    /// Time a connection's reader may take none of an answer.
    pub write_timeout: Duration,
}

/// What a record may hold (`docs/configuration.md#limits`).
#[derive(Debug, Clone, Copy)]
pub struct RecordBounds {
    /// Longest retention a claim may ask for, in seconds.
    pub max_retention_s: u64,
    /// Largest response body a record may hold, in bytes.
    pub max_record_bytes: usize,
}

/// Validated settings of `serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Address the admin API listens on.
    pub admin_listen: SocketAddr,
    /// Database and statement settings.
    pub store: StoreSettings,
    /// Bearer tokens.
    pub tokens: Tokens,
    /// Run migrations before serving.
    pub migrate: bool,
    /// Refuse to start as a role that can do more than serving needs.
    pub require_least_privilege: bool,
    /// Cap on a claim's long-poll budget.
    pub max_wait: Duration,
    /// Caps on parked long-polls.
    pub waiters: WaiterCaps,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Slow-client and overload bounds of the listener.
    pub limits: Limits,
    /// What a record may hold.
    pub records: RecordBounds,
    /// Retention clean-up schedule.
    pub cleanup: CleanupSettings,
    /// What one workload may keep.
    pub quota: QuotaSettings,
    /// Workloads also reach the shared namespace (`--namespace-transition`).
    pub namespace_transition: bool,
}

impl ServeArgs {
    /// `--worker-threads`, which the runtime is built with before anything else runs.
    pub fn worker_threads(&self) -> Option<NonZeroUsize> {
        self.worker_threads
    }

    /// Validates the flags into a [`ServeConfig`], reading token files.
    pub fn into_config(self) -> Result<ServeConfig, ConfigError> {
        let filter = match (self.token, self.token_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::SecretGivenTwice {
                    name: "KEYFLIGHT_TOKEN",
                });
            }
            (Some(inline), None) => Some(TokenSet::inline(
                resolve_secret("KEYFLIGHT_TOKEN", Some(&inline), None)?
                    .ok_or(ConfigError::MissingToken)?,
            )),
            (None, Some(path)) => Some(TokenSet::from_file(path)?),
            (None, None) => None,
        };
        let mesh = self
            .trust_xfcc
            .then(|| mesh_identity(self.xfcc_trusted_peers, self.workloads, self.workloads_file))
            .transpose()?;
        if filter.is_none() && mesh.is_none() {
            return Err(ConfigError::MissingToken);
        }
        if !self.allow_plaintext_database {
            refuse_cleartext(&self.database)?;
        }
        let admin = AdminTokens::load(self.admin.resolve()?, self.admin_tokens_file)?;
        if filter
            .as_ref()
            .is_some_and(|set| set.overlaps(|token| admin.contains(token)))
        {
            return Err(ConfigError::AdminTokenReused);
        }
        check(
            !(self.migrate && self.require_least_privilege),
            "migrate",
            "migrating needs the schema owner, which --require-least-privilege refuses: \
             run `lease-store migrate` as the owner instead",
        )?;
        check(self.pool_size > 0, "pool-size", "must be at least 1")?;
        check(
            self.pool_idle_timeout >= Duration::from_secs(1),
            "pool-idle-timeout",
            "must be at least 1s",
        )?;
        check(
            !self.statement_timeout.is_zero(),
            "statement-timeout",
            "must be positive",
        )?;
        check(
            !self.default_retention.is_zero(),
            "default-retention",
            "must be positive",
        )?;
        check(
            self.settle_horizon >= self.takeover_grace,
            "settle-horizon",
            "must be at least --takeover-grace",
        )?;
        check(
            self.max_body_bytes > 0,
            "max-body-bytes",
            "must be positive",
        )?;
        check(
            self.max_retention.as_secs() <= MAX_RETENTION_S,
            "max-retention",
            "must be at most 3650d (the longest a filter policy may ask for)",
        )?;
        check(
            self.default_retention <= self.max_retention,
            "default-retention",
            "must be at most --max-retention",
        )?;
        let max_record_bytes = self
            .max_record_bytes
            .unwrap_or_else(|| largest_record(self.max_body_bytes));
        check(
            (1..=self.max_body_bytes).contains(&max_record_bytes),
            "max-record-bytes",
            "must be between 1 and --max-body-bytes",
        )?;
        check(
            self.max_body_bytes_in_flight_per_caller >= self.max_body_bytes,
            "max-body-bytes-in-flight-per-caller",
            "must be at least --max-body-bytes",
        )?;
        check(
            self.max_body_bytes_in_flight >= self.max_body_bytes_in_flight_per_caller,
            "max-body-bytes-in-flight",
            "must be at least --max-body-bytes-in-flight-per-caller",
        )?;
        check(
            self.max_answer_bytes_in_flight_per_caller >= self.max_body_bytes,
            "max-answer-bytes-in-flight-per-caller",
            "must be at least --max-body-bytes (a replay of the largest record must fit)",
        )?;
        check(
            self.max_answer_bytes_in_flight >= self.max_answer_bytes_in_flight_per_caller,
            "max-answer-bytes-in-flight",
            "must be at least --max-answer-bytes-in-flight-per-caller",
        )?;
        check(
            !self.write_timeout.is_zero(),
            "write-timeout",
            "must be positive",
        )?;
        check(
            self.max_waiters_per_scope > 0,
            "max-waiters-per-scope",
            "must be at least 1",
        )?;
        check(
            self.max_waiters >= self.max_waiters_per_scope,
            "max-waiters",
            "must be at least --max-waiters-per-scope",
        )?;
        check(
            !self.header_read_timeout.is_zero(),
            "header-read-timeout",
            "must be positive",
        )?;
        check(
            !self.request_timeout.is_zero(),
            "request-timeout",
            "must be positive",
        )?;
        check(
            self.max_connections > 0,
            "max-connections",
            "must be at least 1",
        )?;
        check(
            self.max_concurrent_requests > 0,
            "max-concurrent-requests",
            "must be at least 1",
        )?;
        check(
            self.storage_quota_records > 0 && self.storage_quota_bytes > 0,
            "storage-quota-records and --storage-quota-bytes",
            "must be positive",
        )?;
        check(
            !self.storage_quota_interval.is_zero(),
            "storage-quota-interval",
            "must be positive",
        )?;
        check(
            !self.cleanup_interval.is_zero(),
            "cleanup-interval",
            "must be positive",
        )?;
        check(
            self.cleanup_batch > 0,
            "cleanup-batch",
            "must be at least 1",
        )?;
        check(
            (1..=self.pool_size).contains(&self.batch_workers),
            "batch-workers",
            "must be between 1 and --pool-size",
        )?;
        check(
            (1..=MAX_BATCH_ITEMS).contains(&self.batch_max),
            "batch-max",
            "must be between 1 (batching off) and 1000",
        )?;
        Ok(ServeConfig {
            listen: self.listen,
            admin_listen: self.admin_listen,
            store: StoreSettings {
                database_url: self.database.database_url,
                pool_size: self.pool_size,
                pool_idle_timeout: self.pool_idle_timeout,
                default_retention: self.default_retention,
                default_cooldown: self.default_cooldown,
                statement_timeout: self.statement_timeout,
                takeover_grace: self.takeover_grace,
                settle_horizon: self.settle_horizon,
                batch: BatchSettings {
                    workers: self.batch_workers,
                    max_items: self.batch_max,
                },
                partitions: self.database.partition_urls,
            },
            tokens: Tokens {
                filter: filter.map(Arc::new),
                mesh: mesh.map(Arc::new),
                admin: Arc::new(admin),
            },
            migrate: self.migrate,
            require_least_privilege: self.require_least_privilege,
            max_wait: self.max_wait,
            waiters: WaiterCaps {
                per_scope: self.max_waiters_per_scope,
                total: self.max_waiters,
            },
            max_body_bytes: self.max_body_bytes,
            limits: Limits {
                header_read_timeout: self.header_read_timeout,
                request_timeout: self.request_timeout,
                max_connections: self.max_connections,
                max_concurrent_requests: self.max_concurrent_requests,
                max_body_bytes_in_flight: self.max_body_bytes_in_flight,
                max_body_bytes_in_flight_per_caller: self.max_body_bytes_in_flight_per_caller,
                max_answer_bytes_in_flight: self.max_answer_bytes_in_flight,
                max_answer_bytes_in_flight_per_caller: self.max_answer_bytes_in_flight_per_caller,
                write_timeout: self.write_timeout,
            },
            records: RecordBounds {
                max_retention_s: self.max_retention.as_secs(),
                max_record_bytes,
            },
            cleanup: CleanupSettings {
                interval: self.cleanup_interval,
                batch_size: self.cleanup_batch,
            },
            quota: QuotaSettings {
                max_records: self.storage_quota_records,
                max_bytes: self.storage_quota_bytes,
                interval: self.storage_quota_interval,
            },
            namespace_transition: self.namespace_transition,
        })
    }
}

/// The largest response body a finalize of `max_body_bytes` can carry: base64 takes 4 bytes
/// for 3, and 64 KiB (a quarter of a smaller limit) stay for the JSON framing and the
/// headers, as the filter's `finalize_bytes` assumes (`filter/src/config/validate.rs`).
fn largest_record(max_body_bytes: usize) -> usize {
    let framing = (64 * 1024).min(max_body_bytes / 4);
    ((max_body_bytes - framing) / 4 * 3).max(1)
}

/// The mesh identity settings of `--trust-xfcc`: at least one trusted peer, and the
/// workloads either on the command line or in a file, not both.
fn mesh_identity(
    trusted_peers: Vec<IpNet>,
    workloads: Vec<String>,
    workloads_file: Option<PathBuf>,
) -> Result<MeshIdentity, ConfigError> {
    check(
        !trusted_peers.is_empty(),
        "xfcc-trusted-peers",
        "must name the store's own sidecar",
    )?;
    let allowed = match workloads_file {
        Some(path) => {
            check(
                workloads.is_empty(),
                "workloads-file",
                "the allowlist is either --workload or --workloads-file, not both",
            )?;
            Allowlist::from_file(path)?
        }
        None => Allowlist::fixed(workloads.iter().map(String::as_str))
            .map_err(|reason| ConfigError::Workloads { reason })?,
    };
    Ok(MeshIdentity {
        trusted_peers,
        allowed,
    })
}

/// Refuses a database URL whose connection may run in cleartext: an attacker on the path
/// could read recorded responses and forge the store's view of every claim.
fn refuse_cleartext(database: &DatabaseArgs) -> Result<(), ConfigError> {
    let router = std::iter::once((
        "--database-url (KEYFLIGHT_DATABASE_URL)",
        &database.database_url,
    ));
    let partitions = database
        .partition_urls
        .iter()
        .map(|url| ("--partition-url (KEYFLIGHT_PARTITION_URLS)", url));
    for (setting, url) in router.chain(partitions) {
        if let Some(mode) = crate::db::cleartext_mode(url) {
            return Err(ConfigError::CleartextDatabase {
                setting,
                mode: mode.as_str(),
            });
        }
    }
    Ok(())
}

/// Largest `--batch-max` accepted: past a few hundred calls a batch only holds its row
/// locks longer.
const MAX_BATCH_ITEMS: usize = 1000;

fn check(ok: bool, flag: &'static str, reason: &'static str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid { flag, reason })
    }
}

/// Reads a secret given inline or as a file; `None` when neither is set.
///
/// A file's trailing newline (`echo token > file`) is not part of the token.
pub fn resolve_secret(
    name: &'static str,
    inline: Option<&str>,
    file: Option<&Path>,
) -> Result<Option<Secret>, ConfigError> {
    let value = match (inline, file) {
        (Some(_), Some(_)) => return Err(ConfigError::SecretGivenTwice { name }),
        (None, None) => return Ok(None),
        (Some(value), None) => value.to_owned(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|source| ConfigError::SecretFile {
                name,
                path: path.to_owned(),
                source,
            })?
            .trim_end_matches(['\n', '\r'])
            .to_owned(),
    };
    if value.is_empty() {
        return Err(ConfigError::EmptySecret { name });
    }
    Ok(Some(Secret(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_record_fits_a_finalize_of_the_body_limit() {
        assert_eq!(largest_record(8 * 1024 * 1024), 6_242_304);
        assert_eq!(largest_record(2048), 1152);
        assert_eq!(largest_record(1), 1);
    }

    #[test]
    fn secret_files_lose_their_trailing_newline() {
        let path = std::env::temp_dir().join(format!("keyflight-secret-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").expect("write temp file");
        let secret = resolve_secret("T", None, Some(&path)).expect("readable");
        std::fs::remove_file(&path).expect("remove temp file");
        assert_eq!(secret.map(|s| s.expose().to_owned()), Some("s3cret".into()));
    }

    #[test]
    fn secrets_reject_both_forms_and_empty_values() {
        assert!(matches!(
            resolve_secret("T", Some("a"), Some(Path::new("/nonexistent"))),
            Err(ConfigError::SecretGivenTwice { .. })
        ));
        assert!(matches!(
            resolve_secret("T", Some(""), None),
            Err(ConfigError::EmptySecret { .. })
        ));
        assert!(matches!(resolve_secret("T", None, None), Ok(None)));
    }

    /// `serve` with `args` (and a filter token), as far as its settings go.
    fn serve(args: &[&str]) -> Result<ServeConfig, String> {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            args: ServeArgs,
        }
        let argv = ["serve", "--token", "t"].iter().chain(args);
        let parsed = <Serve as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())?;
        parsed.args.into_config().map_err(|e| e.to_string())
    }

    #[test]
    fn a_database_connection_that_may_run_in_cleartext_is_refused() {
        let verified = "postgres://db/k?sslmode=verify-full&sslrootcert=/ca.pem";
        for args in [
            &["--database-url", "postgres://db/k"][..],
            &["--database-url", "postgres://db/k?sslmode=prefer"],
            &["--database-url", "postgres://db/k?sslmode=disable"],
            &["--database-url", "host=db sslmode=prefer"],
            &[
                "--database-url",
                verified,
                "--partition-url",
                "postgres://p/k",
            ],
        ] {
            let refused = serve(args).expect_err(&format!("{args:?} was accepted"));
            assert!(
                refused.contains("cleartext") && refused.contains("--allow-plaintext-database"),
                "{args:?}: {refused}"
            );
        }
        for args in [
            &["--database-url", verified][..],
            &["--database-url", "postgres://db/k?sslmode=require"],
            &["--database-url", "host=/run/postgresql dbname=k"],
            &[
                "--database-url",
                "postgres://db/k",
                "--allow-plaintext-database",
            ],
        ] {
            if let Err(refused) = serve(args) {
                panic!("{args:?} was refused: {refused}");
            }
        }
    }

    #[test]
    fn by_default_only_the_inbound_sidecar_is_trusted_with_xfcc() {
        let config = serve(&[
            "--database-url",
            "host=/run/pg",
            "--trust-xfcc",
            "--workload",
            "spiffe://a/b",
        ]);
        let mesh = config.unwrap().tokens.mesh.expect("--trust-xfcc");
        assert!(mesh.trusted_beyond_the_sidecar().is_empty());
        assert_eq!(
            mesh.trusted_peers.len(),
            crate::caller::SIDECAR_ADDRESSES.len()
        );
    }

    #[test]
    fn secrets_do_not_debug_print() {
        assert_eq!(
            format!("{:?}", Secret::new("hunter2")),
            "Secret(<redacted>)"
        );
    }
}
