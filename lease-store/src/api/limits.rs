//! Per-call limits (`docs/configuration.md#limits`): a deadline on reading and answering
//! each call, and a cap on `/v1` calls running at once that sheds the excess.
//!
//! The cap is taken without waiting, and shared among the callers (`crate::shares`): a call
//! past it, or past its caller's share while others are owed theirs, is answered 503
//! `journal_unavailable` with `Retry-After` at once (the filter fails closed on it and the
//! client retries), so an overload costs one small answer instead of a queue that grows
//! until memory runs out. It is not tower's `ConcurrencyLimit` + `LoadShed` because a
//! claim that turns into a long-poll must give its slot back before it parks (parked
//! long-polls have their own caps and hold no connection to the database), and tower's
//! limit holds the permit until the response is sent; the claim handler releases its
//! [`Slot`] instead. Otherwise a call keeps its slot until its answer's last bytes are handed
//! to the connection (the answer budget holds it with the answer, [`crate::api::held`]): a
//! reader that does not read holds its slot, not more calls' answers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::budget::charged;
use crate::api::error::{ApiError, TurnedAway};
use crate::metrics::{Metrics, Shed};
use crate::shares::{Activity, Charged, Refused, Shares, Taken};

/// The `/v1` concurrency cap, shared by the middleware.
#[derive(Clone)]
pub struct Concurrency {
    slots: Arc<Shares>,
    metrics: Metrics,
}

impl Concurrency {
    /// A cap of `max` calls at once, shared among the callers `activity` knows
    /// ([`crate::shares`]), counting what it sheds in `metrics`.
    pub fn new(max: usize, activity: Arc<Activity>, metrics: Metrics) -> Self {
        Concurrency {
            slots: Shares::new(max, activity),
            metrics,
        }
    }
}

/// A running call's place under the cap, and whose it is, in the request's extensions;
/// released when the call's answer is handed to the connection, or earlier by
/// [`Slot::release`].
#[derive(Clone)]
pub struct Slot {
    taken: Arc<Mutex<Option<Taken>>>,
    caller: Charged,
}

impl Slot {
    /// Gives the place back before the call ends (a claim about to park).
    pub fn release(&self) {
        if let Ok(mut taken) = self.taken.lock() {
            taken.take();
        }
    }

    /// Whose share the call is charged to (a claim that parks is charged there too).
    pub fn caller(&self) -> &Charged {
        &self.caller
    }
}

/// Middleware: runs the call if a slot is free for its caller, else answers 503 at once.
pub async fn shed_past_limit(
    State(concurrency): State<Concurrency>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = charged(&request);
    let taken = match concurrency.slots.take(caller.clone(), Instant::now()) {
        Ok(taken) => taken,
        Err(Refused::Full) => {
            concurrency.metrics.shed(Shed::Concurrency);
            return ApiError::Overloaded(
                "the lease-store replica is at its concurrency limit (--max-concurrent-requests); retry shortly",
            )
            .into_response();
        }
        Err(Refused::PastShare) => {
            concurrency.metrics.shed(Shed::CallerShare);
            return ApiError::Overloaded(
                "this caller holds more than its share of the replica's concurrency limit while other callers are active (--max-concurrent-requests); retry shortly",
            )
            .into_response();
        }
    };
    // The extension is dropped with the request once the body is read, so the middleware
    // holds the slot too, until the answer is ready; the answer then holds it
    // (`crate::api::budget::reserve_answer`).
    let slot = Slot {
        taken: Arc::new(Mutex::new(Some(taken))),
        caller,
    };
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    drop(slot);
    response
}

/// How long an answer that turns a call away at a limit is held back
/// (`docs/configuration.md#limits`): a caller that ignores `Retry-After` and sends again at
/// once on the same connection is paced to a few calls a second, instead of spinning the
/// replica on refusals at whatever rate its own cores allow. A caller that waits as told
/// does not notice.
pub const REFUSAL_PACE: Duration = Duration::from_millis(100);

/// Middleware: holds back, by [`REFUSAL_PACE`], an answer that turned the call away. It
/// runs outside the limits, so the held-back call keeps no slot and no budget.
pub async fn pace_refusals(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if response.extensions().get::<TurnedAway>().is_some() {
        tokio::time::sleep(REFUSAL_PACE).await;
    }
    response
}

/// Middleware: answers 503 when the call (reading its body included) outlasts `limit`.
pub async fn deadline(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_elapsed) => ApiError::TimedOut.into_response(),
    }
}
