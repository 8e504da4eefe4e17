//! What a worker's slot keeps so that its `Root` can coalesce its streams' store calls on
//! the worker thread (`filter-native/README.md#coalesced-calls`): the streams alive on the
//! worker, the one whose scheduler will run the next turn, the `Root`'s callouts each stream
//! carries, and the answers the main thread took for the worker to hand over.
//!
//! An HTTP dynamic module has no event-loop turn of its own on a worker: a stream's
//! scheduler posts to the worker, which runs the event after its current turn, and a
//! stream's callouts answer on the worker, but both end with the stream
//! (`docs/envoy-facts.md#dynamic-modules`). So the `Root` borrows a live stream for each:
//! the wake-up is a commit of that stream's scheduler, and the `Root`'s callout goes out
//! as that stream's. A stream that ends takes its callouts with it, so each is handed to
//! another live stream, which sends it again ([`Turn::leave`]). Nothing here calls Envoy;
//! the slot does (`worker.rs`).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;

use keyflight_filter::coalesce::{Delivery, StreamId};

use crate::abi::{EnvoyFilter, StreamScheduler};

/// The bit that marks a `Root` token of a carried callout. Envoy numbers a stream's
/// callouts per stream and the configuration's on their own, so the `Root` gets tokens of
/// its own for the carried ones, apart from the configuration's (which count up from 1).
const CARRIED: u32 = 1 << 31;

/// A stream alive on the worker: its Envoy filter, the module's filter of it (for
/// `barrier::guarded`), and its scheduler once one was made.
#[derive(Debug)]
pub struct Live {
    /// Envoy's filter of the stream.
    pub envoy: EnvoyFilter,
    /// The module's filter (`hooks.rs` made it; valid until the stream is destroyed).
    pub module: *const c_void,
    /// The stream's scheduler, made on its first wake-up.
    pub scheduler: Option<StreamScheduler>,
}

/// A `Root` callout as sent, to send it again as another stream's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The lease-store's cluster.
    pub cluster: String,
    /// Its headers.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
    /// The time it was given, from `sent_at_ms` on.
    pub timeout_ms: u64,
    /// When it was first sent (the host's clock).
    pub sent_at_ms: u64,
    /// The streams waiting for its answer, in the order the `Root` named them.
    pub waiting: Vec<StreamId>,
}

impl Request {
    /// What is left of its time at `now_ms`; `None` once spent, when Envoy would have
    /// answered it as timed out.
    fn time_left(&self, now_ms: u64) -> Option<u64> {
        let spent = now_ms.saturating_sub(self.sent_at_ms);
        self.timeout_ms.checked_sub(spent).filter(|&left| left > 0)
    }
}

/// A callout of a stream that ended, to send again as `to`'s, with the time it has left.
#[derive(Debug)]
pub struct Handoff {
    /// The `Root`'s token of the call: the answer to the new callout is its answer.
    pub token: u32,
    /// The live stream that carries it now.
    pub to: StreamId,
    /// That stream's Envoy filter.
    pub envoy: EnvoyFilter,
    /// What to send.
    pub request: Request,
    /// Its timeout now.
    pub timeout_ms: u64,
}

/// What a stream that ended leaves to the slot: its scheduler, to delete, and its
/// callouts, to send again.
#[derive(Debug, Default)]
pub struct Left {
    /// The stream's scheduler, once one was made.
    pub scheduler: Option<StreamScheduler>,
    /// Its callouts that another live stream carries from now on.
    pub handoffs: Vec<Handoff>,
}

/// The worker's turn bookkeeping, under the slot's lock.
#[derive(Debug, Default)]
pub struct Turn {
    live: BTreeMap<StreamId, Live>,
    /// The stream whose scheduled event will run the next turn, once committed.
    wake: Option<StreamId>,
    /// The `Root`'s callouts in flight as a stream's: (carrier, Envoy's id) → `Root` token
    /// and what was sent.
    carried: BTreeMap<(StreamId, u64), (u32, Request)>,
    next_token: u32,
    /// `Root` tokens whose carrier ended before the answer: Envoy cancelled them unanswered.
    lost: Vec<u32>,
    /// Answers the `Root` gave out on the main thread, for the worker to hand over.
    pending: VecDeque<Delivery>,
}

impl Turn {
    /// A stream of the worker began.
    pub fn join(&mut self, stream: StreamId, envoy: EnvoyFilter, module: *const c_void) {
        self.live.insert(
            stream,
            Live {
                envoy,
                module,
                scheduler: None,
            },
        );
    }

    /// A stream of the worker ends at `now_ms`; a wake-up committed to it will not run, and
    /// Envoy cancels its callouts unanswered. Each of those the `Root` sent goes to the first
    /// live stream waiting for it, else to any live stream (a herd's members wait for a call
    /// that names only its sender, `docs/stream-machine.md#herds`), with the time it has
    /// left: one caller leaving fails no other's call, as a Wasm root context's callout
    /// outlives every stream. With no stream left, or no time, the call is lost: it fails.
    pub fn leave(&mut self, stream: StreamId, now_ms: u64) -> Left {
        if self.wake == Some(stream) {
            self.wake = None;
        }
        let scheduler = self.live.remove(&stream).and_then(|live| live.scheduler);
        let carried: Vec<(StreamId, u64)> = self
            .carried
            .range((stream, 0)..=(stream, u64::MAX))
            .map(|(key, _)| *key)
            .collect();
        let mut handoffs = Vec::new();
        for key in carried {
            let Some((token, request)) = self.carried.remove(&key) else {
                continue;
            };
            let to = request
                .waiting
                .iter()
                .copied()
                .find(|id| self.live.contains_key(id))
                .or_else(|| self.live.keys().next().copied());
            let target = to.and_then(|to| self.live.get(&to).map(|live| (to, live.envoy)));
            match (target, request.time_left(now_ms)) {
                (Some((to, envoy)), Some(timeout_ms)) => handoffs.push(Handoff {
                    token,
                    to,
                    envoy,
                    request,
                    timeout_ms,
                }),
                _ => self.lost.push(token),
            }
        }
        Left {
            scheduler,
            handoffs,
        }
    }

    /// The stream `stream`, while alive.
    pub fn live(&self, stream: StreamId) -> Option<&Live> {
        self.live.get(&stream)
    }

    /// Every live stream.
    pub fn streams(&self) -> Vec<StreamId> {
        self.live.keys().copied().collect()
    }

    /// Whether a wake-up is committed and has not run yet.
    pub fn wake_pending(&self) -> bool {
        self.wake.is_some()
    }

    /// The stream to wake the worker through: `prefer` while alive, else any live one.
    pub fn wake_target(&mut self, prefer: Option<StreamId>) -> Option<(StreamId, &mut Live)> {
        let id = prefer
            .filter(|id| self.live.contains_key(id))
            .or_else(|| self.live.keys().next().copied())?;
        self.live.get_mut(&id).map(|live| (id, live))
    }

    /// A wake-up was committed through `stream`.
    pub fn woken(&mut self, stream: StreamId) {
        self.wake = Some(stream);
    }

    /// The committed wake-up runs now.
    pub fn waking(&mut self) {
        self.wake = None;
    }

    /// The `Root` sent `request` as `stream`'s callout, numbered `id` by Envoy: the `Root`'s
    /// token.
    pub fn carry(&mut self, stream: StreamId, id: u64, request: Request) -> u32 {
        self.next_token = self.next_token.wrapping_add(1);
        let token = CARRIED | (self.next_token & !CARRIED);
        self.carried.insert((stream, id), (token, request));
        token
    }

    /// A handed-off call went out again as its new carrier's callout `id`.
    pub fn carried_again(&mut self, handoff: Handoff, id: u64) {
        self.carried
            .insert((handoff.to, id), (handoff.token, handoff.request));
    }

    /// A handed-off call could not go out again: it is lost.
    pub fn lose(&mut self, token: u32) {
        self.lost.push(token);
    }

    /// The `Root`'s token of `stream`'s callout `id`, when the `Root` sent it (and forgets it).
    pub fn answered(&mut self, stream: StreamId, id: u64) -> Option<u32> {
        self.carried.remove(&(stream, id)).map(|(token, _)| token)
    }

    /// The tokens whose carrier ended, since the last call.
    pub fn take_lost(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.lost)
    }

    /// Answers the main thread took, for the worker to hand over.
    pub fn hold_for_worker(&mut self, deliveries: Vec<Delivery>) {
        self.pending.extend(deliveries);
    }

    /// The answers held for the worker.
    pub fn take_pending(&mut self) -> Vec<Delivery> {
        self.pending.drain(..).collect()
    }

    /// Whether anything waits for the worker's next turn.
    pub fn owes_a_turn(&self) -> bool {
        !self.lost.is_empty() || !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use keyflight_filter::store_call::Answer;

    use super::*;

    fn turn_with(streams: &[StreamId]) -> Turn {
        let mut turn = Turn::default();
        for &stream in streams {
            turn.join(stream, EnvoyFilter(std::ptr::null_mut()), std::ptr::null());
        }
        turn
    }

    fn request(waiting: &[StreamId]) -> Request {
        Request {
            cluster: "lease_store".into(),
            headers: vec![(":path".into(), "/v1/batch/claims".into())],
            body: b"[]".to_vec(),
            timeout_ms: 1_000,
            sent_at_ms: 10_000,
            waiting: waiting.to_vec(),
        }
    }

    #[test]
    fn a_carried_callout_gets_a_root_token_apart_from_the_configurations() {
        let mut turn = turn_with(&[1, 2]);
        let first = turn.carry(1, 1, request(&[1]));
        let second = turn.carry(2, 1, request(&[2]));
        assert_ne!(first, second, "two streams' callout 1 are two calls");
        assert!(first & CARRIED != 0 && second & CARRIED != 0);
        assert_eq!(turn.answered(2, 1), Some(second));
        assert_eq!(turn.answered(2, 1), None, "answered once");
        assert_eq!(turn.answered(1, 7), None, "the stream's own callout");
    }

    #[test]
    fn a_carrier_that_ends_hands_its_callouts_to_a_stream_waiting_for_them() {
        let mut turn = turn_with(&[1, 2, 3]);
        let token = turn.carry(1, 3, request(&[1, 3]));
        let kept = turn.carry(2, 3, request(&[2]));
        turn.woken(1);
        let left = turn.leave(1, 10_400);
        assert!(left.scheduler.is_none());
        assert!(turn.take_lost().is_empty(), "no call is lost");
        let [handoff] = left.handoffs.as_slice() else {
            panic!("one callout handed off: {:?}", left.handoffs);
        };
        assert_eq!((handoff.token, handoff.to), (token, 3));
        assert_eq!(handoff.request, request(&[1, 3]), "the same call again");
        assert_eq!(handoff.timeout_ms, 600, "with the time it has left");
        assert!(!turn.wake_pending(), "its scheduled event will not run");
        assert_eq!(turn.answered(2, 3), Some(kept));
        assert!(turn.live(1).is_none());
    }

    #[test]
    fn a_call_sent_again_answers_as_its_new_carriers_callout() {
        let mut turn = turn_with(&[1, 2]);
        let token = turn.carry(1, 3, request(&[1, 2]));
        let mut left = turn.leave(1, 10_000);
        let handoff = left.handoffs.pop().expect("handed off");
        turn.carried_again(handoff, 8);
        assert_eq!(turn.answered(2, 8), Some(token));
        let token = turn.carry(2, 9, request(&[2]));
        turn.leave(2, 10_000);
        assert_eq!(turn.take_lost(), [token], "no stream left to carry it");
    }

    #[test]
    fn a_herds_call_goes_to_any_live_stream_when_none_it_names_is_left() {
        let mut turn = turn_with(&[1, 5]);
        let token = turn.carry(1, 2, request(&[1]));
        let left = turn.leave(1, 10_000);
        let handoffs: Vec<(u32, StreamId)> =
            left.handoffs.iter().map(|h| (h.token, h.to)).collect();
        assert_eq!(handoffs, [(token, 5)]);
    }

    #[test]
    fn a_call_whose_time_is_spent_is_lost_not_sent_again() {
        let mut turn = turn_with(&[1, 2]);
        let token = turn.carry(1, 2, request(&[1, 2]));
        let left = turn.leave(1, 11_000);
        assert!(left.handoffs.is_empty());
        assert!(turn.owes_a_turn(), "the lost call fails in the next turn");
        assert_eq!(turn.take_lost(), [token]);
    }

    #[test]
    fn the_wake_up_goes_through_the_stream_asked_else_any_live_one() {
        let mut turn = turn_with(&[4, 9]);
        assert_eq!(turn.wake_target(Some(9)).map(|(id, _)| id), Some(9));
        assert_eq!(turn.wake_target(Some(5)).map(|(id, _)| id), Some(4));
        turn.leave(4, 0);
        turn.leave(9, 0);
        assert!(turn.wake_target(None).is_none());
    }

    #[test]
    fn answers_held_for_the_worker_owe_it_a_turn() {
        let mut turn = turn_with(&[1]);
        assert!(!turn.owes_a_turn());
        turn.hold_for_worker(vec![Delivery {
            stream: 1,
            answer: Answer::NotSent,
        }]);
        assert!(turn.owes_a_turn());
        assert_eq!(turn.take_pending().len(), 1);
        assert!(!turn.owes_a_turn());
    }
}
