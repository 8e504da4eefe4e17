//! L4: long-poll followers, woken by Postgres `LISTEN/NOTIFY` across replicas
//! (`docs/records.md#the-long-poll`).
//!
//! A same-fingerprint follower (F5) should get the winner's response the
//! moment it is recorded, without polling the database. A record that a
//! follower marked `watched` fires `NOTIFY keyflight_settled, '<scope hex>'`
//! when it leaves `pending` (a trigger, see migrations V1 and V3; unwatched
//! records stay silent, because NOTIFY serializes commits database-wide);
//! NOTIFY is database-wide, so every lease-store replica hears it, whichever
//! replica ran the finalize.
//!
//! Three parts, one file each:
//!
//! - [`waiters`]: the registry of who waits on which scope, and the one
//!   shared read per notification;
//! - [`listener`]: the process's one LISTEN connection, which feeds the
//!   registry and reconnects (to the new primary after a failover);
//! - [`wait`]: [`claim_with_wait`], the follower's loop of re-checks.
//!
//! This module is the handle that ties them together: [`LongPoll::start`]
//! spawns the listener and returns its task's handle, which `serve` joins at
//! shutdown.

mod listener;
mod wait;
mod waiters;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use keyflight_protocol::Digest;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::shares::{Activity, Charged, Refused, Shares};

pub use listener::CHANNEL;
pub use wait::{claim_with_wait, wait_subscribed};
use waiters::Waiters;
pub use waiters::{
    DEFAULT_MAX_WAITERS, DEFAULT_MAX_WAITERS_PER_SCOPE, Full, Subscription, WaiterCaps,
};

/// The process-wide fan-out of settle notifications. Cheap to clone.
#[derive(Clone)]
pub struct LongPoll {
    waiters: Arc<Waiters>,
    /// Callers' shares of the parked long-polls (`crate::shares`).
    shares: Arc<Shares>,
    /// How many LISTEN connections it keeps: one per database whose settles it hears.
    listeners: usize,
    shutdown: watch::Receiver<bool>,
}

impl LongPoll {
    /// [`LongPoll::start_capped`] with the default caps.
    pub fn start(
        database_url: &str,
        shutdown: watch::Receiver<bool>,
    ) -> (LongPoll, JoinHandle<()>) {
        Self::start_capped(&[database_url.to_owned()], WaiterCaps::default(), shutdown)
    }

    /// Starts the process's single LISTEN connection (reconnecting with
    /// backoff if it drops; while disconnected, waiters fall back to their
    /// deadlines) and returns the fan-out handle with the listener task's
    /// handle. At most `caps` long-polls wait at once. The listener stops when
    /// `shutdown` turns `true`.
    ///
    /// A partitioned database keeps one LISTEN connection per partition
    /// (`database_urls`): a `NOTIFY` reaches only the sessions of the database that fired
    /// it. The handle returned ends when every listener has.
    pub fn start_capped(
        database_urls: &[String],
        caps: WaiterCaps,
        shutdown: watch::Receiver<bool>,
    ) -> (LongPoll, JoinHandle<()>) {
        let waiters = Arc::new(Waiters::new(caps));
        let listeners: Vec<JoinHandle<()>> = database_urls
            .iter()
            .map(|url| {
                tokio::spawn(listener::listen(
                    url.clone(),
                    Arc::clone(&waiters),
                    shutdown.clone(),
                ))
            })
            .collect();
        let all = tokio::spawn(async move {
            for listener in listeners {
                if let Err(e) = listener.await {
                    tracing::error!(error = %e, "a long-poll LISTEN task ended abnormally");
                }
            }
        });
        let longpoll = LongPoll {
            waiters,
            shares: Shares::new(caps.total, Activity::new()),
            listeners: database_urls.len(),
            shutdown,
        };
        (longpoll, all)
    }

    /// Whether every LISTEN connection is up (notifications are being received).
    pub fn listening(&self) -> bool {
        self.waiters.listeners_up.load(Ordering::Acquire) == self.listeners
    }

    /// How many long-polls are parked right now, waiting for a settle, a
    /// lease expiry or their deadline (`keyflight_store_longpoll_waiting` on
    /// `/metrics`).
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

    /// Takes a waiter's place on `scope`, or says which cap is reached; the
    /// subscription is notified when the scope settles, and gives its place
    /// back on drop.
    pub fn subscribe(&self, scope: &Digest) -> Result<Subscription, Full> {
        self.waiters.subscribe(*scope)
    }

    /// Who is owed a share of the parked long-polls: the data plane's concurrency cap
    /// records its callers here too (`crate::shares`).
    pub fn activity(&self) -> Arc<Activity> {
        Arc::clone(self.shares.activity())
    }

    /// [`LongPoll::subscribe`] for a claim's own wait, charged to `caller`: past its share
    /// of the parked long-polls while other callers are owed theirs, refused with
    /// [`Full::Share`].
    pub fn subscribe_as(&self, scope: &Digest, caller: Charged) -> Result<Subscription, Full> {
        let share = self
            .shares
            .take(caller, Instant::now())
            .map_err(|refused| match refused {
                Refused::Full => Full::Total,
                Refused::PastShare => Full::Share,
            })?;
        let mut subscription = self.waiters.subscribe(*scope)?;
        subscription.share = Some(share);
        Ok(subscription)
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
