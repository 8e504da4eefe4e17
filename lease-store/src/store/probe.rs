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
//! ([`Store::retire_idle_connections`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::MissedTickBehavior;

use super::{Store, StoreError};

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
                if let Err(e) = store.probe().await {
                    tracing::debug!(error = %e, "database probe failed");
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

    /// One round trip to the database.
    async fn probe(&self) -> Result<(), StoreError> {
        self.run(async |client| {
            client.simple_query("SELECT 1").await?;
            Ok(())
        })
        .await
    }
}
