//! L3: applying the embedded schema migrations, and checking they are current.
//!
//! The SQL files under `lease-store/migrations/` are compiled into the binary
//! (refinery `embed_migrations!`); `lease-store migrate` applies the missing
//! ones, each in its own transaction, and `/readyz` compares the database's
//! version with the newest embedded one. See `migrations/README.md` for the
//! expand/contract rules the files follow.

use std::fmt;

use keyflight_store_core::sql::migrate::TABLE_EXISTS_SQL;

use super::StoreError;
use crate::db;

refinery::embed_migrations!("migrations");

/// refinery's bookkeeping table (its default name).
pub(super) const HISTORY_TABLE: &str = "refinery_schema_history";

/// How long `migrate` waits for any lock before giving up (each file also sets
/// `SET LOCAL lock_timeout`); a migration must never stall live claims.
const LOCK_TIMEOUT: &str = "3s";

/// How many times `migrate` runs the migrations before giving up.
const MIGRATE_ATTEMPTS: u32 = 5;

/// Pause between two migration attempts.
const MIGRATE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// What `migrate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// `(version, name)` of each migration applied by this run, in order.
    pub applied: Vec<(i64, String)>,
}

impl fmt::Display for MigrationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.applied.is_empty() {
            return write!(f, "schema already up to date (V{})", latest_embedded());
        }
        let names: Vec<String> = self
            .applied
            .iter()
            .map(|(version, name)| format!("V{version}__{name}"))
            .collect();
        write!(f, "applied {}", names.join(", "))
    }
}

/// Applies every embedded migration the database lacks.
pub async fn migrate(database_url: &str) -> Result<MigrationReport, StoreError> {
    let (mut client, driver) = owner_connection(database_url).await?;
    let result = match super::partitions::refuse_router(&client).await {
        Ok(()) => run_with_retries(&mut client).await,
        Err(e) => Err(e),
    };
    drop(client);
    // The connection task ends once the client is gone; its result adds nothing.
    let _ = driver.await;
    result
}

/// Gives `role` exactly the rights serving needs on the migrated schema, as the role of
/// `database_url` (the owner that ran the migrations): `migrate --grant-runtime`
/// ([`super::privilege`]).
pub async fn grant_runtime(database_url: &str, role: &str) -> Result<(), StoreError> {
    let (client, driver) = owner_connection(database_url).await?;
    let result = super::privilege::grant_runtime(&client, role).await;
    drop(client);
    let _ = driver.await;
    result
}

/// One connection of the schema owner, with [`LOCK_TIMEOUT`] set; the task that drives it
/// ends once the client is dropped.
pub(super) async fn owner_connection(
    database_url: &str,
) -> Result<
    (
        tokio_postgres::Client,
        tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
    ),
    StoreError,
> {
    let database = db::parse(database_url)?;
    database.warn_if_unverified();
    let (client, connection) = database.config.connect(database.tls).await?;
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("SET lock_timeout = '{LOCK_TIMEOUT}'"))
        .await?;
    Ok((client, driver))
}

/// Runs the migrations, retrying when another process is migrating too.
///
/// `serve` migrates on start, so replicas started together race: the loser's
/// DDL fails (on refinery's history table, or on V1's objects once the
/// winner commits). A failed run is retried a few times; it ends as soon as
/// the schema is current, whoever applied it.
async fn run_with_retries(
    client: &mut tokio_postgres::Client,
) -> Result<MigrationReport, StoreError> {
    let mut attempt = 1;
    loop {
        match migrations::runner().run_async(client).await {
            Ok(report) => {
                return Ok(MigrationReport {
                    applied: report
                        .applied_migrations()
                        .iter()
                        .map(|m| (i64::from(m.version()), m.name().to_owned()))
                        .collect(),
                });
            }
            Err(e) => {
                if check_current(client).await.is_ok() {
                    return Ok(MigrationReport {
                        applied: Vec::new(),
                    });
                }
                if attempt == MIGRATE_ATTEMPTS {
                    return Err(StoreError::Unavailable(format!("migration failed: {e}")));
                }
                tracing::info!(error = %e, attempt, "migration failed, retrying");
            }
        }
        attempt += 1;
        tokio::time::sleep(MIGRATE_RETRY_PAUSE).await;
    }
}

/// `Ok` when the database's newest applied version is at least the newest
/// embedded one. A newer database is fine: under expand/contract an old
/// replica keeps working while a newer release's migration has already run.
pub(super) async fn check_current(client: &tokio_postgres::Client) -> Result<(), StoreError> {
    let exists: bool = client
        .query_one(TABLE_EXISTS_SQL, &[&HISTORY_TABLE])
        .await?
        .try_get(0)?;
    if !exists {
        super::partitions::refuse_router(client).await?;
    }
    let applied: i64 = if exists {
        client
            .query_one(
                &format!("SELECT COALESCE(max(version), 0)::bigint FROM {HISTORY_TABLE}"),
                &[],
            )
            .await?
            .try_get(0)?
    } else {
        0
    };
    let wanted = latest_embedded();
    if applied >= wanted {
        Ok(())
    } else {
        Err(StoreError::Unavailable(format!(
            "database schema is at V{applied}, this binary needs V{wanted}: run `lease-store migrate`"
        )))
    }
}

/// The newest migration version compiled into this binary.
pub(super) fn latest_embedded() -> i64 {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| i64::from(m.version()))
        .max()
        .unwrap_or(0)
}
