//! Coalescing a worker's store calls: the claims (finalizes) its streams make in one
//! event-loop turn go to the lease-store as one batch (`docs/stream-machine.md#coalesced-calls`).
//!
//! A stream does not dispatch its call; it queues it in the worker's [`CallQueue`] and,
//! when it is the first since the root context last woke, wakes the root. The host runs
//! that wake-up after the turn's other callbacks, so the root finds every call the turn
//! made and sends them ([`pack`]): claims together, finalizes together, everything else
//! alone. There is no timer: a lone caller's call goes out alone, in the same turn.
//! When the answer comes back the root splits it ([`answer_batch`]) into the answer each
//! call would have had alone, and hands each to its stream. Nothing here touches the host.

use std::collections::BTreeMap;
use std::mem;
use std::time::Duration;

use keyflight_protocol::wire::ClaimResponse;
use keyflight_protocol::wire::batch::MAX_BATCH_CALLS;

use crate::store_call::{Answer, StoreCall, parse_claim_answer, split_batch_answer};

/// A stream, as the host names it (its context id).
pub type StreamId = u32;

/// A stream's call, queued for the root context to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Whose call it is.
    pub stream: StreamId,
    /// The call, as the stream would have sent it alone.
    pub call: StoreCall,
    /// Its timeout alone (a long-poll's includes the wait); a batch takes the store's.
    pub timeout: Duration,
}

/// The calls a worker's streams made since its root context last woke.
#[derive(Debug, Default)]
pub struct CallQueue {
    calls: Vec<Queued>,
    wake_pending: bool,
    /// Reconcile questions a stream dispatched while the root context handed it an answer:
    /// the host delivers their answers to the root context, which passes each on to its
    /// stream (`docs/envoy-facts.md#callouts`).
    questions: BTreeMap<u32, StreamId>,
}

impl CallQueue {
    /// Queues a call, calling `wake` first when no wake-up of the root context is on its
    /// way yet. A wake-up that fails gives the call back: nothing would send it.
    #[expect(
        clippy::result_large_err,
        reason = "the call goes back to its stream by value, once"
    )]
    pub fn push(&mut self, queued: Queued, wake: impl FnOnce() -> bool) -> Result<(), Queued> {
        if !self.wake_pending {
            if !wake() {
                return Err(queued);
            }
            self.wake_pending = true;
        }
        self.calls.push(queued);
        Ok(())
    }

    /// The root context is awake and takes the queue before its callback returns
    /// (it is handing streams their answers): calls queued meanwhile need no wake-up.
    pub fn root_awake(&mut self) {
        self.wake_pending = true;
    }

    /// `stream` dispatched callout `token` itself, perhaps inside the root context's
    /// callback: if its answer comes to the root context, it belongs to `stream`.
    pub fn asked(&mut self, token: u32, stream: StreamId) {
        self.questions.insert(token, stream);
    }

    /// Whose question callout `token` answers (and forgets it).
    pub fn answered(&mut self, token: u32) -> Option<StreamId> {
        self.questions.remove(&token)
    }

    /// The root context woke: every call queued so far.
    pub fn take(&mut self) -> Vec<Queued> {
        self.wake_pending = false;
        mem::take(&mut self.calls)
    }
}

/// One callout the root context sends for queued calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Send {
    /// One call, on its single route.
    Alone(Queued),
    /// Two or more claims, or two or more finalizes, on their batch route.
    Batch(Vec<Queued>),
}

/// Groups a turn's calls into callouts, in the order they were queued. Claims go
/// together and finalizes go together, at most [`MAX_BATCH_CALLS`] a batch and, for
/// finalizes, no more than half the store's `max_body_bytes` of recorded bodies a batch
/// (a finalize larger than that goes alone). Renewals and releases, a kind with a single
/// call, and every call while `batches` is off (the store has no batch routes) go alone.
pub fn pack(calls: Vec<Queued>, max_body_bytes: u64, batches: bool) -> Vec<Send> {
    let budget = usize::try_from(max_body_bytes / 2).unwrap_or(usize::MAX);
    let mut sends = Vec::new();
    let mut claims: Vec<Queued> = Vec::new();
    let mut finalizes: Vec<Queued> = Vec::new();
    let mut finalize_bytes = 0;
    for queued in calls {
        match &queued.call {
            StoreCall::Claim { .. } if batches => {
                claims.push(queued);
                if claims.len() == MAX_BATCH_CALLS {
                    sends.push(batch(mem::take(&mut claims)));
                }
            }
            StoreCall::Finalize { .. } if batches && recorded_bytes(&queued.call) <= budget => {
                let bytes = recorded_bytes(&queued.call);
                if finalizes.len() == MAX_BATCH_CALLS || finalize_bytes + bytes > budget {
                    sends.push(batch(mem::take(&mut finalizes)));
                    finalize_bytes = 0;
                }
                finalize_bytes += bytes;
                finalizes.push(queued);
            }
            _ => sends.push(Send::Alone(queued)),
        }
    }
    sends.extend(
        [claims, finalizes]
            .into_iter()
            .filter_map(|calls| (!calls.is_empty()).then(|| batch(calls))),
    );
    sends
}

/// A batch of `calls`, or the one call alone.
fn batch(calls: Vec<Queued>) -> Send {
    match <[Queued; 1]>::try_from(calls) {
        Ok([only]) => Send::Alone(only),
        Err(calls) => Send::Batch(calls),
    }
}

/// What a finalize adds to a batch's body: its recorded body as base64, and its headers.
fn recorded_bytes(call: &StoreCall) -> usize {
    match call {
        StoreCall::Finalize { request, .. } => {
            let headers: usize = request
                .response
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.len() + 8)
                .sum();
            request.response.body.len().div_ceil(3) * 4 + headers + 256
        }
        _ => 0,
    }
}

/// An answer for a stream's call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Whose call it answers.
    pub stream: StreamId,
    /// The answer, as if the call had been sent alone.
    pub answer: Answer,
}

/// What a batch's answer comes to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchOutcome {
    /// Calls answered.
    pub delivered: Vec<Delivery>,
    /// Calls to send again, alone: a claim that asked to wait and found its request
    /// still running (a batch never long-polls), or every call of a batch the store
    /// refused as an unknown route.
    pub resend: Vec<Queued>,
    /// The store has no batch routes (it predates them): send calls alone for a while.
    pub batches_unsupported: bool,
}

/// Splits the answer to a batch of `calls` (`docs/stream-machine.md#coalesced-calls`).
///
/// A batch answer that is not readable is no call's answer of its own, so each call gets
/// that whole answer — exactly as if its own call had failed that way: a call that may
/// have run is handled as one whose answer was lost. The exception is a 404 or 405 (a
/// store from before the batch routes): such a store ran none of them, so each is sent
/// again alone.
pub fn answer_batch(calls: Vec<Queued>, answer: Answer) -> BatchOutcome {
    let mut outcome = BatchOutcome::default();
    match split_batch_answer(answer, calls.len()) {
        Ok(answers) => {
            for (queued, answer) in calls.into_iter().zip(answers) {
                if asked_to_wait(&queued.call) && still_running(&answer) {
                    outcome.resend.push(queued);
                } else {
                    outcome.delivered.push(Delivery {
                        stream: queued.stream,
                        answer,
                    });
                }
            }
        }
        Err(Answer::Received {
            status: Some(404 | 405),
            ..
        }) => {
            outcome.resend = calls;
            outcome.batches_unsupported = true;
        }
        Err(whole) => {
            outcome.delivered = calls
                .into_iter()
                .map(|queued| Delivery {
                    stream: queued.stream,
                    answer: whole.clone(),
                })
                .collect();
        }
    }
    outcome
}

/// A claim that allows a long-poll.
fn asked_to_wait(call: &StoreCall) -> bool {
    matches!(call, StoreCall::Claim { request, .. } if request.wait_ms.unwrap_or(0) > 0)
}

/// A claim answer saying the same request is still running.
fn still_running(answer: &Answer) -> bool {
    parse_claim_answer(answer).is_ok_and(|a| matches!(a.response, ClaimResponse::InProgress { .. }))
}

#[cfg(test)]
mod tests;
