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
//! as that stream's. Nothing here calls Envoy; the slot does (`worker.rs`).

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

/// The worker's turn bookkeeping, under the slot's lock.
#[derive(Debug, Default)]
pub struct Turn {
    live: BTreeMap<StreamId, Live>,
    /// The stream whose scheduled event will run the next turn, once committed.
    wake: Option<StreamId>,
    /// The `Root`'s callouts in flight as a stream's: (carrier, Envoy's id) → `Root` token.
    carried: BTreeMap<(StreamId, u64), u32>,
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

    /// A stream of the worker ends: the callouts it carried are lost, and a wake-up
    /// committed to it will not run. Its scheduler, for the slot to delete.
    pub fn leave(&mut self, stream: StreamId) -> Option<StreamScheduler> {
        let carried: Vec<(StreamId, u64)> = self
            .carried
            .range((stream, 0)..=(stream, u64::MAX))
            .map(|(key, _)| *key)
            .collect();
        for key in carried {
            if let Some(token) = self.carried.remove(&key) {
                self.lost.push(token);
            }
        }
        if self.wake == Some(stream) {
            self.wake = None;
        }
        self.live.remove(&stream).and_then(|live| live.scheduler)
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

    /// The `Root` sent a callout as `stream`'s, numbered `id` by Envoy: the `Root`'s token.
    pub fn carry(&mut self, stream: StreamId, id: u64) -> u32 {
        self.next_token = self.next_token.wrapping_add(1);
        let token = CARRIED | (self.next_token & !CARRIED);
        self.carried.insert((stream, id), token);
        token
    }

    /// The `Root`'s token of `stream`'s callout `id`, when the `Root` sent it (and forgets it).
    pub fn answered(&mut self, stream: StreamId, id: u64) -> Option<u32> {
        self.carried.remove(&(stream, id))
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

    #[test]
    fn a_carried_callout_gets_a_root_token_apart_from_the_configurations() {
        let mut turn = turn_with(&[1, 2]);
        let first = turn.carry(1, 1);
        let second = turn.carry(2, 1);
        assert_ne!(first, second, "two streams' callout 1 are two calls");
        assert!(first & CARRIED != 0 && second & CARRIED != 0);
        assert_eq!(turn.answered(2, 1), Some(second));
        assert_eq!(turn.answered(2, 1), None, "answered once");
        assert_eq!(turn.answered(1, 7), None, "the stream's own callout");
    }

    #[test]
    fn a_carrier_that_ends_loses_its_callouts_and_its_wake_up() {
        let mut turn = turn_with(&[1, 2]);
        let lost = turn.carry(1, 3);
        let kept = turn.carry(2, 3);
        turn.woken(1);
        assert!(turn.leave(1).is_none());
        assert_eq!(turn.take_lost(), [lost]);
        assert!(!turn.wake_pending(), "its scheduled event will not run");
        assert_eq!(turn.answered(2, 3), Some(kept));
        assert!(turn.live(1).is_none());
    }

    #[test]
    fn the_wake_up_goes_through_the_stream_asked_else_any_live_one() {
        let mut turn = turn_with(&[4, 9]);
        assert_eq!(turn.wake_target(Some(9)).map(|(id, _)| id), Some(9));
        assert_eq!(turn.wake_target(Some(5)).map(|(id, _)| id), Some(4));
        turn.leave(4);
        turn.leave(9);
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
