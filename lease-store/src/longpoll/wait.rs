//! The claim-with-wait flow: a same-fingerprint follower's loop (F5,
//! `docs/records.md#the-long-poll`).
//!
//! [`claim_with_wait`] subscribes BEFORE it checks the record and keeps that
//! subscription until it returns, so a settle committed between a check and
//! the wait is not lost (the scope's generation channel remembers the wake). Every check marks the
//! record watched before reading it ([`Store::watch_and_read`]), so the
//! settle it waits for is announced. It holds no pooled connection while it
//! waits, and it also wakes when the winner's lease runs out, so an abandoned
//! lease is stolen promptly instead of at the end of the wait budget.
//!
//! Cheap fan-out: a check is the mark and the read-only statement first
//! ([`Store::watch_and_read`], one round trip); only when the record may be
//! winnable (gone, lease or cooldown over, past retention) does the follower
//! run the claim statement. After a notification, all waiters of the scope in
//! this process share ONE read: the first of them to run reads the record for
//! all (the read starts after the notification arrived, so it sees the commit
//! that sent it). A wake from a waiter's own timer (lease expiry, deadline)
//! reads for itself. Thirty-two followers woken by one finalize thus cost one
//! read instead of thirty-two claim-and-read pairs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse};
use tokio::time::Instant;

use super::LongPoll;
use super::waiters::{Parked, Subscription, Waiters};
use crate::store::{ClaimAttempt, Store, StoreError};

/// What woke a parked follower, which decides how it re-checks.
enum Wake {
    /// Its own first check, or its own timer: read the record itself.
    Own,
    /// A settle notification: use the scope's shared read of this generation.
    Notified,
}

/// Waits for the outcome of `scope` when a same-fingerprint claim is
/// `in_progress` and `wait_ms > 0`: [`wait_subscribed`] with a place taken on
/// `scope`, or, when the long-poll caps are reached, the claim's answer at once.
pub async fn claim_with_wait(
    store: &Store,
    longpoll: &LongPoll,
    scope: &Digest,
    req: &ClaimRequest,
) -> Result<ClaimResponse, StoreError> {
    if req.wait_ms.unwrap_or(0) > 0
        && let Ok(subscription) = longpoll.subscribe(scope)
    {
        return Ok(wait_subscribed(store, longpoll, subscription, req, None)
            .await?
            .response);
    }
    Ok(store.claim(scope, req).await?.response)
}

/// The long-poll on the subscription's scope: re-checks the record (claiming
/// it if it may be winnable) first, then each time the record is notified,
/// its lease expires, the budget runs out, or shutdown — holding no pool
/// connection while parked. Returns the final attempt: `in_progress` with
/// `retry_after_s` on timeout or shutdown. The answers are exactly those of
/// [`Store::claim`] (a `won` one with when its statement was sent). The subscription is taken before the first check and
/// kept for the whole wait: a settle that commits after it was taken wakes
/// the waiter, even if it lands between a check and the wait. A record its claims insert
/// is counted to `workload` (`docs/records.md#storage-quota`).
pub async fn wait_subscribed(
    store: &Store,
    longpoll: &LongPoll,
    mut subscription: Subscription,
    req: &ClaimRequest,
    workload: Option<&Arc<str>>,
) -> Result<ClaimAttempt, StoreError> {
    let budget = Duration::from_millis(req.wait_ms.unwrap_or(0));
    if budget.is_zero() {
        return store.claim_as(&subscription.scope, req, workload).await;
    }
    let deadline = Instant::now() + budget;
    let mut shutdown = longpoll.shutdown.clone();
    let mut wake = Wake::Own;
    // A dual claim (`store/dual/`) also waits on the previous recipe's scope: the request
    // may run under either. Past the caps it waits on its own scope and its timers only.
    let mut previous = req
        .previous
        .filter(|previous| previous.scope != subscription.scope)
        .and_then(|previous| longpoll.subscribe(&previous.scope).ok());
    loop {
        let attempt = match &previous {
            None => {
                recheck(
                    store,
                    &longpoll.waiters,
                    &subscription,
                    (req, workload),
                    wake,
                )
                .await?
            }
            Some(other) => {
                recheck_dual(
                    store,
                    &longpoll.waiters,
                    [&subscription, other],
                    (req, workload),
                )
                .await?
            }
        };
        if !matches!(attempt.response, ClaimResponse::InProgress { .. })
            || Instant::now() >= deadline
            || *shutdown.borrow()
        {
            return Ok(attempt);
        }
        let wake_at = attempt
            .pending_until
            .map(Instant::from_std)
            .map_or(deadline, |lease_end| lease_end.min(deadline));
        let _parked = Parked::new(&longpoll.waiters.parked);
        let previous_notified = async {
            match previous.as_mut() {
                Some(other) => other.notified().await,
                None => std::future::pending().await,
            }
        };
        wake = tokio::select! {
            () = subscription.notified() => Wake::Notified,
            () = previous_notified => Wake::Notified,
            () = tokio::time::sleep_until(wake_at) => Wake::Own,
            // A dropped sender disables this branch instead of ending every wait.
            Ok(()) = shutdown.changed() => {
                if *shutdown.borrow() {
                    return Ok(attempt);
                }
                Wake::Own
            }
        };
    }
}

/// One check of a dual claim's two records: both are marked watched (so a settle of
/// either is announced), then the dual claim itself reads both and answers.
async fn recheck_dual(
    store: &Store,
    waiters: &Waiters,
    subscriptions: [&Subscription; 2],
    (req, workload): (&ClaimRequest, Option<&Arc<str>>),
) -> Result<ClaimAttempt, StoreError> {
    for subscription in subscriptions {
        waiters.reads.fetch_add(1, Ordering::Relaxed);
        store.watch_and_read(&subscription.scope).await?;
    }
    waiters.claims.fetch_add(1, Ordering::Relaxed);
    store.claim_as(&subscriptions[0].scope, req, workload).await
}

/// One check of the record: the read (shared after a notification, own
/// otherwise) answers unless the record may be winnable; then the claim runs.
async fn recheck(
    store: &Store,
    waiters: &Waiters,
    subscription: &Subscription,
    (req, workload): (&ClaimRequest, Option<&Arc<str>>),
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
    store.claim_as(scope, req, workload).await
}
