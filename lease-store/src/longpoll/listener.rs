//! The LISTEN connection: one per process, outside the pool.
//!
//! It runs `LISTEN keyflight_settled` and hands each notification's scope to
//! the waiter registry. If the connection drops, it reconnects with capped
//! exponential backoff and, once listening again, wakes every waiter so they
//! re-check what they may have missed; meanwhile waiters fall back to their
//! deadlines.
//!
//! A LISTEN connection only ever receives, so a database that stops
//! answering without closing the socket (a frozen host) would look exactly
//! like a quiet one. The listener therefore runs a liveness check every
//! [`LIVENESS_INTERVAL`] and treats no answer within [`LIVENESS_TIMEOUT`] as a
//! lost connection; connecting and `LISTEN` are bounded by [`CONNECT_TIMEOUT`];
//! TCP keepalives are tuned as for the pool (`store::tune_tcp`).
//!
//! After a failover (L10, `docs/failover.md#following-the-primary`) the
//! listener must hear the *new* primary: NOTIFY is not replicated, so a
//! standby or a retired primary never delivers a settle. Its URL is the
//! pool's, so with `target_session_attrs=read-write` a reconnect lands on the
//! node that takes writes. A killed or demoted primary closes the connection,
//! which starts the reconnect; one that stays up but turns read-only (fenced)
//! is caught by the liveness check, which then also asks whether the session
//! still takes writes ([`LIVENESS_SQL`]) and reconnects when it does not.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt as _;
use keyflight_protocol::Digest;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::{AsyncMessage, SimpleQueryMessage};

use super::waiters::Waiters;
use crate::db::{self, DatabaseUrlError};
use crate::store::{per_host_connect_timeout, tune_tcp};
use keyflight_store_core::sql::listener::LIVENESS_SQL;

/// The NOTIFY channel migration V1's trigger announces settled scopes on.
pub const CHANNEL: &str = "keyflight_settled";

/// First reconnect delay after the listen connection fails; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Bound on connecting (TCP and the startup handshake) and on running `LISTEN`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the listener checks that the database still answers.
const LIVENESS_INTERVAL: Duration = Duration::from_secs(5);
/// How long the liveness check may take before the connection counts as lost.
const LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);

/// The listener task: connect, LISTEN, dispatch notifications; on any
/// failure back off and start over, until shutdown.
pub(super) async fn listen(
    database_url: String,
    waiters: Arc<Waiters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = MIN_BACKOFF;
    while !*shutdown.borrow() {
        tokio::select! {
            result = listen_once(&database_url, &waiters, &mut backoff) => {
                if let Err(e) = result {
                    tracing::warn!(error = %e, "long-poll LISTEN connection lost; reconnecting");
                }
            }
            Ok(()) = shutdown.changed() => continue,
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            Ok(()) = shutdown.changed() => continue,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Why a LISTEN connection ended.
#[derive(Debug, thiserror::Error)]
enum ListenError {
    /// The connection failed or was closed by the server.
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
    /// The URL or its certificate files cannot be used (read again at each reconnect).
    #[error("database url: {0}")]
    Url(#[from] DatabaseUrlError),
    /// The database did not answer in time (frozen host, lost network).
    #[error("{0} did not complete within {1:?}")]
    NoAnswer(&'static str, Duration),
    /// The URL asks for a read-write session and this one turned read-only: the node
    /// is no longer the primary, and its NOTIFYs (if any) are not the primary's.
    #[error("the database no longer takes writes (it is not the primary)")]
    NotPrimary,
}

/// Runs a database step, giving up after `limit`.
async fn within<T>(
    limit: Duration,
    step: &'static str,
    future: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, ListenError> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => Ok(result?),
        Err(_elapsed) => Err(ListenError::NoAnswer(step, limit)),
    }
}

/// One connection's life: returns when the connection ends or stops answering.
async fn listen_once(
    database_url: &str,
    waiters: &Waiters,
    backoff: &mut Duration,
) -> Result<(), ListenError> {
    let database = db::parse(database_url)?;
    let mut config = database.config;
    config.application_name("keyflight-lease-store-listen");
    tune_tcp(&mut config);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(per_host_connect_timeout(&config, CONNECT_TIMEOUT));
    }
    let needs_primary = config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite;
    // `connect_timeout` covers the TCP connect only, not the startup handshake.
    let (client, mut connection) =
        within(CONNECT_TIMEOUT, "connecting", config.connect(database.tls)).await?;
    // The connection must be polled for LISTEN to complete and for
    // notifications to arrive; forward what it yields to this task.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            if tx.send(message).is_err() {
                break;
            }
        }
    });
    let listen_sql = format!("LISTEN {CHANNEL}");
    if let Err(e) = within(CONNECT_TIMEOUT, "LISTEN", client.batch_execute(&listen_sql)).await {
        driver.abort();
        return Err(e);
    }
    *backoff = MIN_BACKOFF;
    waiters.listeners_up.fetch_add(1, Ordering::AcqRel);
    tracing::info!(channel = CHANNEL, "long-poll listener connected");
    waiters.wake_all();
    let outcome = dispatch(&client, waiters, &mut rx, needs_primary).await;
    waiters.listeners_up.fetch_sub(1, Ordering::AcqRel);
    drop(client);
    driver.abort();
    outcome
}

/// Wakes each notified scope's waiters until the connection ends, fails,
/// misses a liveness check, or (when `needs_primary`) turns read-only.
async fn dispatch(
    client: &tokio_postgres::Client,
    waiters: &Waiters,
    messages: &mut tokio::sync::mpsc::UnboundedReceiver<
        Result<AsyncMessage, tokio_postgres::Error>,
    >,
    needs_primary: bool,
) -> Result<(), ListenError> {
    let mut liveness =
        tokio::time::interval_at(Instant::now() + LIVENESS_INTERVAL, LIVENESS_INTERVAL);
    liveness.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.recv() => match message {
                None => return Ok(()),
                Some(Ok(AsyncMessage::Notification(n))) => match Digest::from_hex(n.payload()) {
                    Ok(scope) => waiters.wake(&scope),
                    Err(_) => tracing::warn!(
                        channel = n.channel(),
                        "ignoring a settle notification whose payload is not a scope digest"
                    ),
                },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
            },
            _ = liveness.tick() => {
                let answer =
                    within(LIVENESS_TIMEOUT, "the liveness check", client.simple_query(LIVENESS_SQL))
                        .await?;
                if needs_primary && read_only(&answer) {
                    return Err(ListenError::NotPrimary);
                }
            }
        }
    }
}

/// Whether the liveness check's answer says the session is read-only.
fn read_only(answer: &[SimpleQueryMessage]) -> bool {
    answer.iter().any(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0) == Some("on"),
        _ => false,
    })
}
