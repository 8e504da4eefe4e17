//! The request-body and answer budgets (`docs/configuration.md#limits`): how many body bytes
//! may be in flight at once, overall and per caller, so a burst of large finalizes is shed
//! instead of buffered until the replica runs out of memory, and how many answer bytes, so a
//! caller that replays a large record many times and reads slowly is shed too.
//!
//! A call reserves its declared size (`content-length`; a body without one reserves
//! `--max-body-bytes`, the most it could be) before its body is read, and gives it back when
//! it is answered. A call that does not fit is answered 503 with `Retry-After` at once,
//! before a byte of its body is read. The caller is the workload when the store knows its
//! mesh identity (`docs/configuration.md#caller-identity`: behind the store's own sidecar
//! every call comes from the sidecar's address, so the address would make all workloads one
//! caller), else the peer address: with one proxy per node that keeps one node's burst from
//! taking every other node's share.
//!
//! The reservation counts the bytes on the wire; decoding a finalize holds about twice that
//! (the JSON text, then the decoded body), which the sizing in `docs/configuration.md`
//! allows for.
//!
//! An answer is weighed once it is built, and reserved until its last bytes are handed to
//! the connection ([`crate::api::held`]), together with the call's concurrency slot; one
//! that does not fit is dropped and answered 503 with `Retry-After` instead. A call whose
//! caller has no room left (not even for its last replay that did not fit) is answered so
//! before it runs. A batch weighs each replay
//! as it is read ([`AnswerAccount`]): past the caller's share the rest of its replays are
//! answered 503 one by one, before their bodies are copied into the answer, so a flood of
//! large replays costs the replica its answer budget, not a multiple of it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::body::{Body, HttpBody as _};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::answer_rate::AnswerRate;
use crate::api::error::ApiError;
use crate::api::held::Held;
use crate::api::limits::Slot;
use crate::caller::Caller;
use crate::metrics::{Metrics, Shed};
use crate::shares::{Activity, Charged};

/// The request-body budget: [`Budget`], and the most a body of unknown length may be.
#[derive(Clone)]
pub struct BodyBudget {
    budget: Budget,
    max_body: usize,
    metrics: Metrics,
}

/// The answer budget, and the pace of each caller's answers ([`AnswerRate`]).
#[derive(Clone)]
pub struct AnswerBudget {
    budget: Budget,
    rate: Arc<AnswerRate>,
    metrics: Metrics,
}

/// Bytes in flight, and the bounds on them.
#[derive(Clone)]
struct Budget(Arc<Inner>);

struct Inner {
    max_total: usize,
    max_per_caller: usize,
    in_flight: Mutex<InFlight>,
}

#[derive(Default)]
struct InFlight {
    total: usize,
    by_caller: HashMap<Charged, usize>,
    /// The size of each caller's last replay that did not fit, while the caller holds
    /// answers: until enough of them are sent, the next would not fit either.
    last_shed: HashMap<Charged, usize>,
}

/// The answer bytes one call has reserved while its answer is assembled: a batch weighs
/// each replay here as it is read, and the finished answer takes the reservation over.
#[derive(Clone)]
pub struct AnswerAccount(Arc<Account>);

struct Account {
    budget: AnswerBudget,
    caller: Charged,
    reserved: Mutex<Option<Reservation>>,
    /// Set once a weighing failed: the caller's share is as good as spent for this answer.
    shed: AtomicBool,
}

/// Bytes reserved for one call, given back on drop.
struct Reservation {
    budget: Arc<Inner>,
    caller: Charged,
    bytes: usize,
}

impl BodyBudget {
    /// A budget of `max_total` bytes, `max_per_caller` of them for one caller; a body of
    /// unknown length counts as `max_body`.
    pub fn new(max_body: usize, max_total: usize, max_per_caller: usize, metrics: Metrics) -> Self {
        BodyBudget {
            budget: Budget::new(max_total, max_per_caller),
            max_body,
            metrics,
        }
    }
}

impl AnswerBudget {
    /// A budget of `max_total` answer bytes, `max_per_caller` of them for one caller, and
    /// `per_second` answer bytes shared by the callers `activity` knows ([`AnswerRate`]).
    pub fn new(
        (max_total, max_per_caller): (usize, usize),
        (per_second, activity): (u64, Arc<Activity>),
        metrics: Metrics,
    ) -> Self {
        AnswerBudget {
            budget: Budget::new(max_total, max_per_caller),
            rate: Arc::new(AnswerRate::new(per_second, max_per_caller, activity)),
            metrics,
        }
    }
}

impl AnswerAccount {
    /// Reserves `bytes` more of the call's answer, or answers why not (503, counted): the
    /// first bytes of a caller holding nothing may pass its share, as a whole answer may.
    pub fn weigh(&self, bytes: usize) -> Result<(), ApiError> {
        let Account {
            budget,
            caller,
            reserved,
            shed,
        } = &*self.0;
        let now = Instant::now();
        if !budget.rate.allows(caller, now) {
            shed.store(true, Ordering::Relaxed);
            return Err(budget.paced());
        }
        let mut reserved = lock(reserved);
        let fits = match reserved.as_mut() {
            Some(reservation) => reservation.grow(bytes),
            None => match budget.budget.reserve(caller.clone(), bytes) {
                Some(reservation) => {
                    *reserved = Some(reservation);
                    true
                }
                None => false,
            },
        };
        match fits {
            true => {
                budget.rate.charge(caller, bytes, now);
                Ok(())
            }
            false => {
                shed.store(true, Ordering::Relaxed);
                budget.budget.shed(caller, bytes);
                Err(budget.spent())
            }
        }
    }

    /// Refuses (503, counted) once a weighing of this answer failed: a batch's calls that
    /// have not run yet would only read replays that cannot be sent.
    pub fn still_open(&self) -> Result<(), ApiError> {
        match self.0.shed.load(Ordering::Relaxed) {
            true => Err(self.0.budget.spent()),
            false => Ok(()),
        }
    }

    /// The reservation for the finished answer of `bytes`, its bytes not weighed yet drawn
    /// from the caller's pace. What the call weighed is resized to it, without a bound:
    /// past the replays weighed, an answer adds only its calls' small answers and framing. A
    /// call that weighed nothing reserves it now, if it fits.
    fn settle(&self, bytes: usize) -> Option<Reservation> {
        let Account { budget, caller, .. } = &*self.0;
        let (reservation, weighed) = match lock(&self.0.reserved).take() {
            Some(mut reservation) => {
                let weighed = reservation.bytes;
                reservation.resize(bytes);
                (reservation, weighed)
            }
            None => (budget.budget.reserve(caller.clone(), bytes)?, 0),
        };
        budget
            .rate
            .charge(caller, bytes.saturating_sub(weighed), Instant::now());
        Some(reservation)
    }
}

impl AnswerBudget {
    /// Counts an answer shed for its caller's pace and says why.
    fn paced(&self) -> ApiError {
        self.metrics.shed(Shed::AnswerRate);
        ApiError::Overloaded(
            "this caller has had more than its share of the replica's answer bytes a second while other callers are active (--max-answer-bytes-per-second); retry shortly",
        )
    }

    /// Counts a shed answer and says why.
    fn spent(&self) -> ApiError {
        self.metrics.shed(Shed::AnswerBudget);
        ApiError::Overloaded(
            "the lease-store replica's answer budget is spent (--max-answer-bytes-in-flight, per caller --max-answer-bytes-in-flight-per-caller); retry shortly",
        )
    }
}

impl Budget {
    fn new(max_total: usize, max_per_caller: usize) -> Self {
        Budget(Arc::new(Inner {
            max_total,
            max_per_caller,
            in_flight: Mutex::default(),
        }))
    }

    /// Reserves `bytes` for `caller`, or `None` when that would pass either bound. A caller
    /// holding nothing may pass its share (not the total): an answer larger than the share
    /// (a batch of large replays) is then sent alone rather than refused on every retry.
    fn reserve(&self, caller: Charged, bytes: usize) -> Option<Reservation> {
        let mut in_flight = self.0.lock();
        let held = in_flight.by_caller.get(&caller).copied().unwrap_or(0);
        let over_share = held > 0 && held + bytes > self.0.max_per_caller;
        if in_flight.total + bytes > self.0.max_total || over_share {
            return None;
        }
        in_flight.total += bytes;
        in_flight.by_caller.insert(caller.clone(), held + bytes);
        Some(Reservation {
            budget: Arc::clone(&self.0),
            caller,
            bytes,
        })
    }

    /// Remembers that a replay of `bytes` did not fit `caller`'s share.
    fn shed(&self, caller: &Charged, bytes: usize) {
        let mut in_flight = self.0.lock();
        if in_flight.by_caller.contains_key(caller) {
            in_flight.last_shed.insert(caller.clone(), bytes);
        }
    }

    /// Whether `caller` has no room left: its share, or the whole budget, is held, or its
    /// last replay that did not fit would still not fit.
    fn full_for(&self, caller: &Charged) -> bool {
        let in_flight = self.0.lock();
        let held = in_flight.by_caller.get(caller).copied().unwrap_or(0);
        let last_shed = in_flight.last_shed.get(caller).copied().unwrap_or(0);
        in_flight.total >= self.0.max_total
            || held >= self.0.max_per_caller
            || held + last_shed > self.0.max_per_caller
    }
}

impl Reservation {
    /// Adds `bytes`, within both bounds (the caller already holds this reservation).
    fn grow(&mut self, bytes: usize) -> bool {
        let mut in_flight = self.budget.lock();
        let held = in_flight.by_caller.get(&self.caller).copied().unwrap_or(0);
        if in_flight.total + bytes > self.budget.max_total
            || held + bytes > self.budget.max_per_caller
        {
            return false;
        }
        in_flight.total += bytes;
        in_flight
            .by_caller
            .insert(self.caller.clone(), held + bytes);
        self.bytes += bytes;
        true
    }

    /// Makes this reservation `bytes`, whatever the bounds.
    fn resize(&mut self, bytes: usize) {
        let mut in_flight = self.budget.lock();
        let held = in_flight.by_caller.entry(self.caller.clone()).or_default();
        *held = *held - self.bytes + bytes;
        in_flight.total = in_flight.total - self.bytes + bytes;
        self.bytes = bytes;
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, InFlight> {
        lock(&self.in_flight)
    }
}

/// Each edit of the counts is a pair of additions or subtractions done together; a poisoned
/// lock still holds consistent counts.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut in_flight = self.budget.lock();
        in_flight.total -= self.bytes;
        if let Some(held) = in_flight.by_caller.get_mut(&self.caller) {
            *held -= self.bytes;
            if *held == 0 {
                in_flight.by_caller.remove(&self.caller);
                in_flight.last_shed.remove(&self.caller);
            }
        }
    }
}

/// Whose share `request` is charged to.
pub fn charged(request: &Request) -> Charged {
    match request.extensions().get::<Caller>() {
        Some(Caller::Workload(id)) => Charged::Workload(Arc::clone(id)),
        _ => Charged::Peer(
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip()),
        ),
    }
}

/// Middleware: reserves the call's body before it is read; sheds it when it does not fit.
pub async fn reserve_body(
    State(budget): State<BodyBudget>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let bytes = match declared {
        Some(0) => return next.run(request).await,
        Some(n) if n > budget.max_body => return ApiError::PayloadTooLarge.into_response(),
        Some(n) => n,
        // No body at all (a GET such as the filter's epoch question): nothing to reserve.
        // Charged as one of unknown length, two of them spent a caller's whole budget.
        None if request.body().is_end_stream() => return next.run(request).await,
        None => budget.max_body,
    };
    let Some(reservation) = budget.budget.reserve(charged(&request), bytes) else {
        budget.metrics.shed(Shed::BodyBudget);
        return ApiError::Overloaded(
            "the lease-store replica's request-body budget is spent (--max-body-bytes-in-flight, per caller --max-body-bytes-in-flight-per-caller); retry shortly",
        )
        .into_response();
    };
    let response = next.run(request).await;
    drop(reservation);
    response
}

/// Middleware: refuses at once a call whose caller has no room left for an answer; else
/// gives the route an [`AnswerAccount`], weighs the finished answer, sends it only within
/// the answer budget, and holds the reservation and the call's concurrency slot until the
/// answer's last bytes are handed to the connection.
pub async fn reserve_answer(
    State(budget): State<AnswerBudget>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = charged(&request);
    if budget.budget.full_for(&caller) {
        return budget.spent().into_response();
    }
    if !budget.rate.allows(&caller, Instant::now()) {
        return budget.paced().into_response();
    }
    let slot = request.extensions().get::<Slot>().cloned();
    let account = AnswerAccount(Arc::new(Account {
        budget: budget.clone(),
        caller,
        reserved: Mutex::new(None),
        shed: AtomicBool::new(false),
    }));
    request.extensions_mut().insert(account.clone());
    let response = next.run(request).await;
    // The routes build their answers whole (JSON, a frame, a problem), so this is their size.
    let bytes = usize::try_from(response.body().size_hint().lower()).unwrap_or(usize::MAX);
    if bytes == 0 {
        return response;
    }
    let Some(reservation) = account.settle(bytes) else {
        return budget.spent().into_response();
    };
    response.map(|body| Body::new(Held::new(body, (reservation, slot))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_respect_both_bounds_and_are_given_back() {
        let budget = Budget::new(30, 20);
        let a = Charged::Peer(IpAddr::from([10, 0, 0, 1]));
        let b = Charged::Peer(IpAddr::from([10, 0, 0, 2]));
        let first = budget.reserve(a.clone(), 10).expect("fits");
        let second = budget
            .reserve(a.clone(), 10)
            .expect("fits the caller's share");
        assert!(budget.reserve(a, 1).is_none(), "past the caller's share");
        let third = budget
            .reserve(b.clone(), 10)
            .expect("another caller's share");
        assert!(budget.reserve(b, 1).is_none(), "past the overall budget");
        drop((first, second, third));
        let alone = budget
            .reserve(Charged::Peer(IpAddr::from([10, 0, 0, 3])), 25)
            .expect("a caller holding nothing may pass its share");
        assert!(
            budget
                .reserve(Charged::Peer(IpAddr::from([10, 0, 0, 4])), 10)
                .is_none()
        );
        drop(alone);
        assert!(budget.0.lock().by_caller.is_empty());
        assert_eq!(budget.0.lock().total, 0);
    }

    #[test]
    fn a_reservation_grows_within_the_share_and_is_resized_to_the_answer() {
        let budget = Budget::new(30, 10);
        let a = Charged::Peer(IpAddr::from([10, 0, 0, 1]));
        let mut weighed = budget.reserve(a.clone(), 6).expect("fits");
        assert!(weighed.grow(4), "up to the share");
        assert!(!weighed.grow(1), "past the share");
        assert!(budget.full_for(&a), "no room is left for the caller");
        assert!(!budget.full_for(&Charged::Peer(IpAddr::from([10, 0, 0, 2]))));
        weighed.resize(12);
        assert_eq!(
            budget.0.lock().by_caller[&a],
            12,
            "the finished answer is held"
        );
        weighed.resize(3);
        assert!(!budget.full_for(&a));
        drop(weighed);
        assert!(budget.0.lock().by_caller.is_empty());
        assert_eq!(budget.0.lock().total, 0);
    }

    #[test]
    fn a_caller_whose_last_replay_did_not_fit_is_full_until_room_frees() {
        let budget = Budget::new(30, 10);
        let a = Charged::Peer(IpAddr::from([10, 0, 0, 1]));
        let first = budget.reserve(a.clone(), 4).expect("fits");
        let mut second = budget.reserve(a.clone(), 3).expect("fits");
        assert!(!second.grow(5), "7 + 5 is past the share");
        budget.shed(&a, 5);
        assert!(budget.full_for(&a), "the same replay would not fit");
        drop(second);
        assert!(!budget.full_for(&a), "4 + 5 fits");
        drop(first);
        assert!(
            budget.0.lock().last_shed.is_empty(),
            "forgotten with the answers"
        );
    }

    #[test]
    fn workloads_behind_one_sidecar_have_a_share_each() {
        let budget = Budget::new(30, 10);
        let checkout = Charged::Workload("spiffe://td/ns/a/sa/checkout".into());
        let cart = Charged::Workload("spiffe://td/ns/b/sa/cart".into());
        let held = budget.reserve(checkout.clone(), 10).expect("fits");
        assert!(budget.reserve(checkout, 1).is_none(), "its share is spent");
        let other = budget
            .reserve(cart, 10)
            .expect("the other workload's own share");
        drop((held, other));
    }
}
