//! Per-call limits (`docs/configuration.md#limits`): a deadline on reading and answering
//! each call, and a cap on `/v1` calls running at once that sheds the excess.
//!
//! The cap is a semaphore taken without waiting: a call past it is answered 503
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
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api::error::ApiError;
use crate::metrics::{Metrics, Shed};

/// The `/v1` concurrency cap, shared by the middleware.
#[derive(Clone)]
pub struct Concurrency {
    slots: Arc<Semaphore>,
    metrics: Metrics,
}

impl Concurrency {
    /// A cap of `max` calls at once, counting what it sheds in `metrics`.
    pub fn new(max: usize, metrics: Metrics) -> Self {
        Concurrency {
            slots: Arc::new(Semaphore::new(max)),
            metrics,
        }
    }
}

/// A running call's place under the cap, in the request's extensions; released when the
/// call's answer is handed to the connection, or earlier by [`Slot::release`].
#[derive(Clone)]
pub struct Slot(Arc<Mutex<Option<OwnedSemaphorePermit>>>);

impl Slot {
    /// Gives the place back before the call ends (a claim about to park).
    pub fn release(&self) {
        if let Ok(mut permit) = self.0.lock() {
            permit.take();
        }
    }
}

/// Middleware: runs the call if a slot is free, else answers 503 at once.
pub async fn shed_past_limit(
    State(concurrency): State<Concurrency>,
    mut request: Request,
    next: Next,
) -> Response {
    let Ok(permit) = Arc::clone(&concurrency.slots).try_acquire_owned() else {
        concurrency.metrics.shed(Shed::Concurrency);
        return ApiError::Overloaded(
            "the lease-store replica is at its concurrency limit (--max-concurrent-requests); retry shortly",
        )
        .into_response();
    };
    // The extension is dropped with the request once the body is read, so the middleware
    // holds the slot too, until the answer is ready; the answer then holds it
    // (`crate::api::budget::reserve_answer`).
    let slot = Slot(Arc::new(Mutex::new(Some(permit))));
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    drop(slot);
    response
}

/// Middleware: answers 503 when the call (reading its body included) outlasts `limit`.
pub async fn deadline(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_elapsed) => ApiError::TimedOut.into_response(),
    }
}
