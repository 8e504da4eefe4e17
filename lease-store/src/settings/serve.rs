//! `serve`'s settings: the flags checked against each other and turned into plain data
//! ([`ServeSettings`]) before anything starts, so the request path never re-checks one.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use keyflight_protocol::wire::MAX_RETENTION_S;

use super::credentials::{filter_tokens, mesh_settings};
use super::{AdminTokenSettings, ConfigError, CredentialSettings, DatabaseArgs, ServeArgs, check};
use crate::cleanup::CleanupSettings;
use crate::longpoll::WaiterCaps;
use crate::quota::QuotaSettings;
use crate::store::{BatchSettings, StoreSettings};

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
    /// Answer bytes a second shared by the active callers (`0`: none paced).
    pub max_answer_bytes_per_second: u64,
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
pub struct ServeSettings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Address the admin API listens on.
    pub admin_listen: SocketAddr,
    /// Database and statement settings.
    pub store: StoreSettings,
    /// Who may call what.
    pub credentials: CredentialSettings,
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

    /// Validates the flags into [`ServeSettings`]; the settings files are read when the
    /// live sets are built from them ([`crate::access`]).
    pub fn into_settings(self) -> Result<ServeSettings, ConfigError> {
        let filter = filter_tokens(self.token, self.token_file)?;
        let mesh = self
            .trust_xfcc
            .then(|| mesh_settings(self.xfcc_trusted_peers, self.workloads, self.workloads_file))
            .transpose()?;
        if filter.is_none() && mesh.is_none() {
            return Err(ConfigError::MissingToken);
        }
        if !self.allow_plaintext_database {
            refuse_cleartext(&self.database)?;
        }
        let admin = AdminTokenSettings {
            inline: self.admin.resolve()?,
            file: self.admin_tokens_file,
        };
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
        Ok(ServeSettings {
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
            credentials: CredentialSettings {
                filter,
                mesh,
                admin,
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
                max_answer_bytes_per_second: self.max_answer_bytes_per_second,
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_default_record_fits_a_finalize_of_the_body_limit() {
        assert_eq!(largest_record(8 * 1024 * 1024), 6_242_304);
        assert_eq!(largest_record(2048), 1152);
        assert_eq!(largest_record(1), 1);
    }

    /// `serve` with `args` (and a filter token), as far as its settings go.
    pub(crate) fn serve(args: &[&str]) -> Result<ServeSettings, String> {
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            args: ServeArgs,
        }
        let argv = ["serve", "--token", "t"].iter().chain(args);
        let parsed = <Serve as clap::Parser>::try_parse_from(argv).map_err(|e| e.to_string())?;
        parsed.args.into_settings().map_err(|e| e.to_string())
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
}
