//! L4: long-poll followers, woken by Postgres `LISTEN/NOTIFY` across replicas.
//!
//! A same-fingerprint follower (F5) should get the winner's response the
//! moment it is recorded, without polling the database. A record that a
//! follower marked `watched` fires `NOTIFY keyflight_settled, '<scope hex>'`
//! when it leaves `pending` (a trigger, see migrations V1 and V3; unwatched
//! records stay silent, because NOTIFY serializes commits database-wide);
//! NOTIFY is database-wide, so every lease-store replica hears it, whichever
//! replica ran the finalize.
//!
//! Each process keeps ONE dedicated connection (outside the pool) that runs
//! `LISTEN keyflight_settled` and fans notifications out to the waiters
//! registered for that scope — a map from scope to waiters, so a notification
//! wakes only its own scope's waiters, however many thousands wait on others.
//! If the connection drops, the listener reconnects with capped exponential
//! backoff and, once listening again, wakes every waiter so they re-check
//! what they may have missed; meanwhile waiters fall back to their deadlines.
//!
//! A LISTEN connection only ever receives, so a database that stops
//! answering without closing the socket (a frozen host) would look exactly
//! like a quiet one. The listener therefore runs a liveness check every
//! [`LIVENESS_INTERVAL`] and treats no answer within [`LIVENESS_TIMEOUT`] as a
//! lost connection; connecting and `LISTEN` are bounded by [`CONNECT_TIMEOUT`];
//! TCP keepalives are tuned as for the pool (`store::tune_tcp`).
//!
//! After a failover (L10) the listener must hear the *new* primary: NOTIFY is
//! not replicated, so a standby or a retired primary never delivers a settle.
//! Its URL is the pool's, so with `target_session_attrs=read-write` a
//! reconnect lands on the node that takes writes. A killed or demoted primary
//! closes the connection, which starts the reconnect; one that stays up but
//! turns read-only (fenced) is caught by the liveness check, which then also
//! asks whether the session still takes writes ([`LIVENESS_SQL`]) and
//! reconnects when it does not. Each reconnect wakes every waiter to re-check
//! its record, because settles committed while no listener was connected (and
//! `watched` marks lost in the switch) announced nothing to this replica.
//!
//! [`claim_with_wait`] is the follower's loop. It subscribes BEFORE it checks
//! the record and keeps that subscription until it returns, so a settle
//! committed between a check and the wait is not lost (the `Notify` keeps the
//! permit). Every check marks the record watched before reading it
//! ([`Store::watch_and_read`]), so the settle it waits for is announced. It
//! holds no pooled connection while it waits, and it also wakes when the
//! winner's lease runs out, so an abandoned lease is stolen promptly instead
//! of at the end of the wait budget.
//!
//! Cheap fan-out: a check is the mark and the read-only statement first
//! ([`Store::watch_and_read`], one round trip); only when the record may be
//! winnable (gone, lease or cooldown over, past retention) does the follower
//! run the claim statement. After a notification, all waiters of the scope in this process
//! share ONE read: each notification starts a new per-scope generation, and
//! the first of its waiters to run reads the record for all of them (a
//! `OnceCell` per generation; the read starts after the notification arrived,
//! so it sees the commit that sent it). A wake from a waiter's own timer
//! (lease expiry, deadline) reads for itself. Thirty-two followers woken by
//! one finalize thus cost one read instead of thirty-two claim-and-read pairs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt as _;
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse};
use tokio::sync::{Notify, OnceCell, watch};
use tokio::time::Instant;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::{AsyncMessage, NoTls, SimpleQueryMessage};

use crate::store::{
    ClaimAttempt, RecordSnapshot, Store, StoreError, per_host_connect_timeout, tune_tcp,
};

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
/// The liveness check: any answer proves the server alive, and the value says
/// whether this session still takes writes (`off`), as a primary's does.
const LIVENESS_SQL: &str = "SELECT current_setting('transaction_read_only')";

/// The process-wide fan-out of settle notifications. Cheap to clone.
#[derive(Clone)]
pub struct LongPoll {
    waiters: Arc<Waiters>,
    shutdown: watch::Receiver<bool>,
}

impl LongPoll {
    /// Starts the process's single LISTEN connection (reconnecting with
    /// backoff if it drops; while disconnected, waiters fall back to their
    /// deadlines) and returns the fan-out handle. The listener stops when
    /// `shutdown` turns `true`.
    pub fn start(database_url: &str, shutdown: watch::Receiver<bool>) -> LongPoll {
        let waiters = Arc::new(Waiters::default());
        tokio::spawn(listen(
            database_url.to_owned(),
            Arc::clone(&waiters),
            shutdown.clone(),
        ));
        LongPoll { waiters, shutdown }
    }

    /// Whether the LISTEN connection is up (notifications are being received).
    pub fn listening(&self) -> bool {
        self.waiters.listening.load(Ordering::Acquire)
    }

    /// How many long-polls are parked right now, waiting for a settle, a
    /// lease expiry or their deadline (a gauge for `/metrics`).
    pub fn waiting(&self) -> usize {
        self.waiters.parked.load(Ordering::Relaxed)
    }

    /// The statements long-poll re-checks have run so far, by kind.
    pub fn rechecks(&self) -> Rechecks {
        Rechecks {
            reads: self.waiters.reads.load(Ordering::Relaxed),
            claims: self.waiters.claims.load(Ordering::Relaxed),
        }
    }

    /// Registers interest in `scope`; the subscription is notified when the
    /// scope settles, and unregisters itself on drop.
    fn subscribe(&self, scope: &Digest) -> Subscription {
        self.waiters.subscribe(*scope)
    }
}

/// Counts of the database work [`claim_with_wait`] did to re-check records
/// (process-wide, since start): a gauge of the fan-out's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rechecks {
    /// Watch-and-reads ([`Store::watch_and_read`]), one per shared read.
    pub reads: u64,
    /// Claims ([`Store::claim`]) run because a read said the record may be winnable.
    pub claims: u64,
}

/// What woke a parked follower, which decides how it re-checks.
enum Wake {
    /// Its own first check, or its own timer: read the record itself.
    Own,
    /// A settle notification: use the scope's shared read of this generation.
    Notified,
}

/// Waits for the outcome of `scope` when a same-fingerprint claim is
/// `in_progress` and `wait_ms > 0`: re-checks the record (claiming it if it
/// may be winnable) first, then each time the record is notified, its lease
/// expires, the budget runs out, or shutdown — holding no pool connection
/// while parked. Returns the final answer: `in_progress` with
/// `retry_after_s` on timeout or shutdown. The answers are exactly those of
/// [`Store::claim`].
pub async fn claim_with_wait(
    store: &Store,
    longpoll: &LongPoll,
    scope: &Digest,
    req: &ClaimRequest,
) -> Result<ClaimResponse, StoreError> {
    let budget = Duration::from_millis(req.wait_ms.unwrap_or(0));
    if budget.is_zero() {
        return Ok(store.claim(scope, req).await?.response);
    }
    let deadline = Instant::now() + budget;
    let mut shutdown = longpoll.shutdown.clone();
    // Subscribe first, and for the whole wait: a settle that commits after
    // this point wakes us, even if it lands between a check and the wait.
    let subscription = longpoll.subscribe(scope);
    let mut wake = Wake::Own;
    loop {
        let attempt = recheck(store, &longpoll.waiters, &subscription, req, wake).await?;
        if !matches!(attempt.response, ClaimResponse::InProgress { .. })
            || Instant::now() >= deadline
            || *shutdown.borrow()
        {
            return Ok(attempt.response);
        }
        let wake_at = attempt
            .pending_until
            .map(Instant::from_std)
            .map_or(deadline, |lease_end| lease_end.min(deadline));
        let _parked = Parked::new(&longpoll.waiters.parked);
        wake = tokio::select! {
            () = subscription.notified() => Wake::Notified,
            () = tokio::time::sleep_until(wake_at) => Wake::Own,
            // A dropped sender disables this branch instead of ending every wait.
            Ok(()) = shutdown.changed() => {
                if *shutdown.borrow() {
                    return Ok(attempt.response);
                }
                Wake::Own
            }
        };
    }
}

/// One check of the record: the read (shared after a notification, own
/// otherwise) answers unless the record may be winnable; then the claim runs.
async fn recheck(
    store: &Store,
    waiters: &Waiters,
    subscription: &Subscription,
    req: &ClaimRequest,
    wake: Wake,
) -> Result<ClaimAttempt, StoreError> {
    let scope = &subscription.scope;
    let read = async || {
        waiters.reads.fetch_add(1, Ordering::Relaxed);
        store.watch_and_read(scope).await.map(Arc::new)
    };
    let snapshot = match wake {
        Wake::Own => read().await?,
        Wake::Notified => Arc::clone(subscription.shared_read().get_or_try_init(read).await?),
    };
    if let Some(record) = &*snapshot
        && let Some(answer) = record.answer_for(&req.fingerprint)?
    {
        return Ok(answer);
    }
    waiters.claims.fetch_add(1, Ordering::Relaxed);
    store.claim(scope, req).await
}

/// Counts a parked long-poll for as long as it lives.
struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Parked(counter)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One read of a scope's record, shared by the waiters woken by one notification.
type SharedRead = OnceCell<Arc<Option<RecordSnapshot>>>;

/// The waiters registered on one scope, each with its subscription id, and
/// the shared read of the latest notification's generation.
#[derive(Default)]
struct ScopeWaiters {
    list: Vec<(u64, Arc<Notify>)>,
    latest: Arc<SharedRead>,
}

impl ScopeWaiters {
    /// Starts a new generation (its read not yet run) and wakes every waiter.
    fn wake(&mut self) {
        self.latest = Arc::default();
        for (_, notify) in &self.list {
            notify.notify_one();
        }
    }
}

/// The waiters registered on each scope.
type WaiterMap = HashMap<Digest, ScopeWaiters>;

/// Waiters per scope. A `std` mutex: held only for map edits, never across an await.
#[derive(Default)]
struct Waiters {
    listening: AtomicBool,
    parked: AtomicUsize,
    reads: AtomicU64,
    claims: AtomicU64,
    next_id: AtomicU64,
    by_scope: Mutex<WaiterMap>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, WaiterMap> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (each edit is one push or retain), so a poisoned lock is still usable.
        self.by_scope.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn subscribe(self: &Arc<Self>, scope: Digest) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        self.lock()
            .entry(scope)
            .or_default()
            .list
            .push((id, Arc::clone(&notify)));
        Subscription {
            waiters: Arc::clone(self),
            scope,
            id,
            notify,
        }
    }

    /// Wakes the waiters on one scope.
    fn wake(&self, scope: &Digest) {
        if let Some(waiters) = self.lock().get_mut(scope) {
            waiters.wake();
        }
    }

    /// Wakes every waiter (after a reconnect, when notifications may have been missed).
    fn wake_all(&self) {
        for waiters in self.lock().values_mut() {
            waiters.wake();
        }
    }
}

/// One waiter's registration; removes itself from the map on drop.
struct Subscription {
    waiters: Arc<Waiters>,
    scope: Digest,
    id: u64,
    notify: Arc<Notify>,
}

impl Subscription {
    /// Resolves once the scope was notified after this subscription was made
    /// (or after the previous `notified` returned).
    async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The shared read of the scope's latest notification. Called after a
    /// notification woke this waiter, so that read starts after it arrived.
    fn shared_read(&self) -> Arc<SharedRead> {
        self.waiters
            .lock()
            .get(&self.scope)
            .map_or_else(Arc::default, |waiters| Arc::clone(&waiters.latest))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = self.waiters.lock();
        if let Some(waiters) = map.get_mut(&self.scope) {
            waiters.list.retain(|(id, _)| *id != self.id);
            if waiters.list.is_empty() {
                map.remove(&self.scope);
            }
        }
    }
}

/// The listener task: connect, LISTEN, dispatch notifications; on any
/// failure back off and start over, until shutdown.
async fn listen(database_url: String, waiters: Arc<Waiters>, mut shutdown: watch::Receiver<bool>) {
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
    let mut config: tokio_postgres::Config = database_url.parse()?;
    config.application_name("keyflight-lease-store-listen");
    tune_tcp(&mut config);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(per_host_connect_timeout(&config, CONNECT_TIMEOUT));
    }
    let needs_primary = config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite;
    // `connect_timeout` covers the TCP connect only, not the startup handshake.
    let (client, mut connection) =
        within(CONNECT_TIMEOUT, "connecting", config.connect(NoTls)).await?;
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
    waiters.listening.store(true, Ordering::Release);
    tracing::info!(channel = CHANNEL, "long-poll listener connected");
    waiters.wake_all();
    let outcome = dispatch(&client, waiters, &mut rx, needs_primary).await;
    waiters.listening.store(false, Ordering::Release);
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
