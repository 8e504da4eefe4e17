//! Watching the database while nobody calls it, so the takeover grace starts after every
//! outage this replica could have seen, whatever its traffic
//! (`docs/records.md#the-takeover-grace`).
//!
//! The grace is fed by the outcome of every database call ([`Store::run`]). A replica
//! that served nothing during an outage would otherwise never see it fail, and would take
//! over a lease the moment the database returned, before the winner's outbox lands its
//! record. So every store runs this probe: a trivial query every [`PROBE_INTERVAL`]
//! through the same `run`, whose failures and answers feed the grace like any call's.
//!
//! The same task closes the pooled connections that stayed idle past `--pool-idle-timeout`
//! ([`Store::retire_idle_connections`]), and its query also reads whether the session has
//! the settings every pooled connection asks for in its `options`: a pooler in front of
//! Postgres may drop that startup parameter without a word
//! (`docs/configuration.md#the-connection-pool`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::MissedTickBehavior;
use tokio_postgres::SimpleQueryMessage;

use super::{PLANNER_SETTINGS, Store, StoreError};

/// Time between two probes of the database.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// The probe task; it stops when the last store handle that holds this is dropped.
#[derive(Debug)]
pub(super) struct Probe(AbortHandle);

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Probe {
    /// Starts probing through `single` (a handle that does not hold the probe itself).
    pub(super) fn start(single: &Store) -> Arc<Probe> {
        let store = single.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(PROBE_INTERVAL);
            // After a stall, one probe at once, not a burst of the missed ones.
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                // The outcome has fed the grace; a failure is logged by nothing else.
                match store.probe().await {
                    Ok(applied) => store.note_session_settings(applied),
                    Err(e) => tracing::debug!(error = %e, "database probe failed"),
                }
                store.retire_idle_connections();
            }
        });
        Arc::new(Probe(task.abort_handle()))
    }
}

impl Store {
    /// Closes the pooled connections idle longer than `--pool-idle-timeout`. The pool hands
    /// out the most recently used connection first, so the ones the load no longer needs
    /// are the ones left idle; closing them keeps a connection that a firewall or the
    /// server's `idle_session_timeout` may have cut from waiting in the pool for the next
    /// burst, and the database from keeping backends nobody uses
    /// (`docs/configuration.md#the-connection-pool`).
    pub(super) fn retire_idle_connections(&self) {
        let idle_timeout = self.pool_idle_timeout;
        let retired = self
            .pool
            .retain(|_, metrics| metrics.last_used() < idle_timeout)
            .removed
            .len();
        if retired > 0 {
            tracing::debug!(retired, "closed idle database connections");
        }
    }

    /// One round trip to the database: whether its session has the settings the store
    /// asked for.
    async fn probe(&self) -> Result<bool, StoreError> {
        let sql = Arc::clone(&self.session_settings_sql);
        self.run(async move |client| {
            let answer = client.simple_query(&sql).await?;
            Ok(answer.iter().any(|message| {
                matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("t"))
            }))
        })
        .await
    }

    /// Says so once when pooled sessions stop (or start again) having the settings the
    /// store asked for; `/metrics` shows the state as `keyflight_store_pool_settings_missing`.
    fn note_session_settings(&self, applied: bool) {
        let was_missing = self
            .session_settings_missing
            .swap(!applied, Ordering::Relaxed);
        match (was_missing, applied) {
            (false, false) => tracing::warn!(
                settings = %asked_settings(),
                "a pooled database session lacks the settings the store starts every connection \
                 with: a pooler in front of Postgres may be dropping the `options` startup \
                 parameter; pass it on, or set them on the store's role \
                 (docs/configuration.md#the-connection-pool)"
            ),
            (true, true) => {
                tracing::info!("pooled database sessions have the store's settings again")
            }
            _ => {}
        }
    }
}

/// The settings the probe looks for, as an operator would set them on a role.
fn asked_settings() -> String {
    let planner = PLANNER_SETTINGS.map(|(name, value)| format!("{name} = {value}"));
    format!("statement_timeout, {}", planner.join(", "))
}

/// The probe's query: `t` when the session runs with `statement_timeout` and every
/// [`PLANNER_SETTINGS`] as `pg_config` asked, however they got there (the connection's
/// `options`, or the role's own settings behind a pooler that drops them).
pub(super) fn session_settings_sql(statement_timeout: Duration) -> String {
    let planner: String = PLANNER_SETTINGS
        .map(|(name, value)| format!(" AND current_setting('{name}') = '{value}'"))
        .concat();
    format!(
        "SELECT current_setting('statement_timeout')::interval = interval '{} milliseconds'{planner}",
        statement_timeout.as_millis()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use keyflight_testkit::pg::PgCluster;
    use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

    use super::session_settings_sql;
    use crate::db;
    use crate::store::pg_config;

    const TIMEOUT: Duration = Duration::from_secs(5);

    async fn connect(config: &Config) -> Client {
        let (client, connection) = config.connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    /// What the probe's query says of `client`'s session for a store with `timeout`.
    async fn applied(client: &Client, timeout: Duration) -> bool {
        let answer = client
            .simple_query(&session_settings_sql(timeout))
            .await
            .unwrap();
        answer
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("t")))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_probe_tells_a_session_with_the_stores_settings_from_one_without() {
        let cluster = PgCluster::start();
        let url = cluster.url();
        let pooled = connect(&pg_config(&url, TIMEOUT).unwrap().config).await;
        assert!(applied(&pooled, TIMEOUT).await);
        assert!(
            !applied(&pooled, Duration::from_secs(7)).await,
            "another statement_timeout is not the store's"
        );
        // What a pooler that drops `options` hands over: a session without them.
        let dropped = connect(&db::parse(&url).unwrap().config).await;
        assert!(!applied(&dropped, TIMEOUT).await);
        dropped
            .batch_execute("SET statement_timeout = '5s'; SET enable_seqscan = off")
            .await
            .unwrap();
        assert!(!applied(&dropped, TIMEOUT).await, "jit is still on");
        dropped.batch_execute("SET jit = off").await.unwrap();
        assert!(
            !applied(&dropped, TIMEOUT).await,
            "each statement is still planned for its arguments"
        );
        dropped
            .batch_execute("SET plan_cache_mode = force_generic_plan")
            .await
            .unwrap();
        assert!(applied(&dropped, TIMEOUT).await);
    }

    /// The workaround configuration.md gives for a pooler that drops `options`.
    #[tokio::test(flavor = "current_thread")]
    async fn the_roles_own_settings_satisfy_the_probe() {
        let cluster = PgCluster::start();
        let url = cluster.url();
        let admin = connect(&db::parse(&url).unwrap().config).await;
        admin
            .batch_execute(
                "ALTER ROLE CURRENT_USER SET statement_timeout = '5000ms';
                 ALTER ROLE CURRENT_USER SET enable_seqscan = off;
                 ALTER ROLE CURRENT_USER SET jit = off;
                 ALTER ROLE CURRENT_USER SET plan_cache_mode = force_generic_plan;",
            )
            .await
            .unwrap();
        let behind_a_pooler = connect(&db::parse(&url).unwrap().config).await;
        assert!(applied(&behind_a_pooler, TIMEOUT).await);
    }
}
