//! L5: the retention cleanup loop.
//!
//! Every replica runs one. The first pass waits a random fraction of the
//! interval, so replicas started together (a rollout) do not all delete at
//! once; then a pass runs every interval. A pass first makes the abandoned
//! lapses of at-most-once claims `unknown` (`Store::hold_abandoned_batch`,
//! `store/held.rs`), then deletes (`Store::delete_expired_batch`, which holds
//! the SQL and its safety argument), each in bounded batches until one comes
//! back short, so no single statement locks or scans more than `batch_size` rows.
//!
//! Shutdown never waits for a pass: each batch is already bounded by the
//! store's answer timeout, and the loop abandons a running pass as soon as
//! shutdown begins (a batch is one autocommit statement, so at worst the
//! server finishes that one batch on its own).

use std::time::Duration;

use keyflight_protocol::time::millis;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::{Store, StoreError};

/// How the cleanup loop paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupSettings {
    /// Time between passes (and the upper bound of the first pass' jitter).
    pub interval: Duration,
    /// Most rows one DELETE statement may remove.
    pub batch_size: i64,
}

/// Spawns the retention cleanup loop. `on_deleted` is called with each
/// batch's row count (for the `ttl_deletes` counter). The loop ends when
/// `shutdown` turns `true`, mid-pass included; a failed pass is logged and
/// retried next interval.
pub fn spawn(
    store: Store,
    settings: CleanupSettings,
    on_deleted: impl Fn(u64) + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut next_pass = tokio::time::Instant::now() + first_delay(settings.interval);
        while !*shutdown.borrow() {
            tokio::select! {
                () = tokio::time::sleep_until(next_pass) => {}
                Ok(()) = shutdown.changed() => continue,
            }
            next_pass += settings.interval;
            let outcome = tokio::select! {
                outcome = run_pass(&store, settings.batch_size, &on_deleted) => outcome,
                Ok(()) = shutdown.changed() => continue,
            };
            match outcome {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(deleted, "retention cleanup pass"),
                Err(e) => tracing::warn!(error = %e, "retention cleanup pass failed"),
            }
            // A pass that overran the interval starts the next one now, not in a burst.
            next_pass = next_pass.max(tokio::time::Instant::now());
        }
    })
}

/// One full pass: deletes batches until one comes back short. Returns the
/// total number of rows deleted.
pub async fn run_once(store: &Store, batch_size: i64) -> Result<u64, StoreError> {
    run_pass(store, batch_size, &|_| {}).await
}

async fn run_pass(
    store: &Store,
    batch_size: i64,
    on_deleted: &(impl Fn(u64) + ?Sized),
) -> Result<u64, StoreError> {
    let full_batch = u64::try_from(batch_size).unwrap_or(0);
    let mut held = 0;
    loop {
        let batch = store.hold_abandoned_batch(batch_size).await?;
        held += batch;
        if batch < full_batch {
            break;
        }
    }
    if held > 0 {
        tracing::warn!(
            held,
            "abandoned at-most-once leases held as unknown: an operator must resolve them"
        );
    }
    let mut total = 0;
    loop {
        let deleted = store.delete_expired_batch(batch_size).await?;
        if deleted > 0 {
            on_deleted(deleted);
        }
        total += deleted;
        if deleted < full_batch {
            return Ok(total);
        }
    }
}

/// A random delay in `[0, interval)` for the first pass.
fn first_delay(interval: Duration) -> Duration {
    let ms = millis(interval);
    if ms == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(rand::random_range(0..ms))
}
