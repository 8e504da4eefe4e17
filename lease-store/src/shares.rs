//! Callers' shares of a replica's capacity (`docs/configuration.md#limits`): its concurrency
//! cap, its parked long-polls and its database connections, so one workload's burst cannot
//! take every place while another workload waits.
//!
//! The rule ([`may_take`]) is work-conserving: a caller alone uses the whole cap, as a
//! single-workload installation expects; when others have called within the last
//! [`ACTIVE_WINDOW`], each is owed an equal share, and a caller past its share may take
//! another slot only while a quarter of the cap stays free for the callers below theirs.
//! A caller is the workload under `--trust-xfcc`, else the peer address ([`Charged`]), as
//! for the body and answer budgets (a parked long-poll knows no peer address: its callers
//! without a workload share one place).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a caller counts as active after its last call.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(10);

/// Whose share a call is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Charged {
    /// An allowlisted workload, by its SPIFFE id.
    Workload(Arc<str>),
    /// A caller without a mesh identity, by its peer address.
    Peer(IpAddr),
}

/// Whether a caller holding `held` of the `cap` slots may take one more, with `in_use`
/// taken in all and `active` callers (itself included) owed a share.
pub fn may_take(held: usize, in_use: usize, cap: usize, active: usize) -> bool {
    if in_use >= cap {
        return false;
    }
    let share = cap.div_ceil(active.max(1));
    held < share || cap - in_use > cap / 4
}

/// When each caller last called: who is owed a share. One registry may serve several
/// [`Shares`] (the data plane's slots and its parked long-polls), so a workload that only
/// made calls is owed a share of the long-polls too.
#[derive(Default)]
pub struct Activity(Mutex<Seen>);

#[derive(Default)]
struct Seen {
    last: HashMap<Charged, Instant>,
    /// When callers quiet for the window were last forgotten.
    swept: Option<Instant>,
}

/// How often the registry forgets quiet callers: every call notes its caller, and walking
/// every caller on each call would put O(callers) work on the data plane's hot path. A
/// caller is so owed a share for up to this long past [`ACTIVE_WINDOW`].
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Activity {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Notes that `caller` called at `now`; returns how many callers called within the
    /// last [`ACTIVE_WINDOW`] (give or take [`SWEEP_EVERY`]).
    pub fn saw(&self, caller: &Charged, now: Instant) -> usize {
        // A poisoned lock still holds usable times.
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match seen.last.get_mut(caller) {
            Some(last) => *last = (*last).max(now),
            None => {
                seen.last.insert(caller.clone(), now);
            }
        }
        if seen
            .swept
            .is_none_or(|swept| now.saturating_duration_since(swept) >= SWEEP_EVERY)
        {
            seen.last
                .retain(|_, last| now.saturating_duration_since(*last) < ACTIVE_WINDOW);
            seen.swept = Some(now);
        }
        seen.last.len()
    }

    /// How many callers called within the last [`ACTIVE_WINDOW`] (give or take
    /// [`SWEEP_EVERY`], as [`Activity::saw`] counts them), without noting a call.
    pub fn active(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).last.len()
    }
}

/// The places each caller holds.
pub struct Shares {
    cap: usize,
    activity: Arc<Activity>,
    state: Mutex<State>,
    /// Wakes callers waiting for a place ([`Shares::enter`]) when one is given back.
    freed: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    in_use: usize,
    held: HashMap<Charged, usize>,
}

/// One place taken by a caller, given back on drop.
pub struct Taken {
    shares: Arc<Shares>,
    caller: Charged,
}

/// Why a place was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every place is taken.
    Full,
    /// The caller is past its share while others are owed theirs.
    PastShare,
}

impl Shares {
    /// Shares of `cap` places among the callers `activity` knows.
    pub fn new(cap: usize, activity: Arc<Activity>) -> Arc<Self> {
        Arc::new(Shares {
            cap,
            activity,
            state: Mutex::default(),
            freed: tokio::sync::Notify::new(),
        })
    }

    /// Takes a place for `caller`, waiting while every place is taken or the caller is past
    /// its share: for work that queues anyway (the database pool's connections), so that a
    /// caller with many calls queued waits behind its own share, not in front of others.
    pub async fn enter(self: &Arc<Self>, caller: Charged) -> Taken {
        self.wait_for(caller).await
    }

    /// [`Shares::enter`], waiting at most `limit`.
    pub async fn enter_within(self: &Arc<Self>, caller: Charged, limit: Duration) -> Option<Taken> {
        tokio::time::timeout(limit, self.wait_for(caller))
            .await
            .ok()
    }

    async fn wait_for(self: &Arc<Self>, caller: Charged) -> Taken {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the try, so a place given back in between still wakes it.
            freed.as_mut().enable();
            if let Ok(taken) = self.take(caller.clone(), Instant::now()) {
                return taken;
            }
            freed.await;
        }
    }

    /// The registry of who is owed a share.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Takes a place for `caller` at `now`.
    pub fn take(self: &Arc<Self>, caller: Charged, now: Instant) -> Result<Taken, Refused> {
        let active = self.activity.saw(&caller, now);
        let mut state = self.lock();
        let held = state.held.get(&caller).copied().unwrap_or(0);
        if !may_take(held, state.in_use, self.cap, active) {
            return Err(match state.in_use >= self.cap {
                true => Refused::Full,
                false => Refused::PastShare,
            });
        }
        state.in_use += 1;
        state.held.insert(caller.clone(), held + 1);
        Ok(Taken {
            shares: Arc::clone(self),
            caller,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Each edit is a pair of additions or subtractions done together; a poisoned lock
        // still holds consistent counts.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let mut state = self.shares.lock();
        state.in_use -= 1;
        if let Some(held) = state.held.get_mut(&self.caller) {
            *held -= 1;
            if *held == 0 {
                state.held.remove(&self.caller);
            }
        }
        drop(state);
        self.shares.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> Charged {
        Charged::Peer(IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn a_caller_alone_uses_the_whole_cap() {
        let shares = Shares::new(8, Activity::new());
        let now = Instant::now();
        let taken: Vec<Taken> = (0..8)
            .map(|_| shares.take(peer(1), now).expect("within the cap"))
            .collect();
        assert_eq!(shares.take(peer(1), now).err(), Some(Refused::Full));
        drop(taken);
        assert!(shares.lock().held.is_empty());
        assert_eq!(shares.lock().in_use, 0);
    }

    #[test]
    fn a_greedy_caller_leaves_a_quarter_of_the_cap_to_another_active_one() {
        let shares = Shares::new(8, Activity::new());
        let now = Instant::now();
        // The other caller called a moment ago, and holds nothing now.
        drop(shares.take(peer(2), now));
        let greedy: Vec<Taken> = (0..6)
            .map(|_| shares.take(peer(1), now).expect("its share, then borrowed"))
            .collect();
        assert_eq!(
            shares.take(peer(1), now).err(),
            Some(Refused::PastShare),
            "past its share of 4 with only a quarter of the cap free"
        );
        let other: Vec<Taken> = (0..2)
            .map(|_| shares.take(peer(2), now).expect("below its share"))
            .collect();
        assert_eq!(shares.take(peer(2), now).err(), Some(Refused::Full));
        drop((greedy, other));
    }

    #[test]
    fn a_caller_seen_by_one_share_is_owed_a_place_in_another() {
        let slots = Shares::new(8, Activity::new());
        let parked = Shares::new(4, Arc::clone(slots.activity()));
        let now = Instant::now();
        drop(slots.take(peer(2), now));
        let greedy: Vec<Taken> = (0..3)
            .map(|_| parked.take(peer(1), now).expect("its share, then borrowed"))
            .collect();
        assert_eq!(parked.take(peer(1), now).err(), Some(Refused::PastShare));
        drop(greedy);
    }

    #[test]
    fn a_caller_quiet_for_the_window_is_owed_nothing() {
        let shares = Shares::new(8, Activity::new());
        let then = Instant::now();
        drop(shares.take(peer(2), then));
        let later = then + ACTIVE_WINDOW;
        let taken: Vec<Taken> = (0..8)
            .map(|_| shares.take(peer(1), later).expect("alone again"))
            .collect();
        drop(taken);
    }

    #[test]
    fn quiet_callers_are_forgotten_at_most_once_a_second_whatever_the_calls() {
        let activity = Activity::new();
        let then = Instant::now();
        assert_eq!(activity.saw(&peer(2), then), 1);
        let later = then + ACTIVE_WINDOW;
        assert_eq!(
            activity.saw(&peer(1), later),
            1,
            "the quiet caller is forgotten"
        );
        assert_eq!(activity.saw(&peer(2), later), 2);
        let quiet_since = later + ACTIVE_WINDOW;
        assert_eq!(
            activity.saw(&peer(1), quiet_since),
            1,
            "a sweep is due: peer 2 is forgotten"
        );
        assert_eq!(
            activity.saw(&peer(3), quiet_since + SWEEP_EVERY / 2),
            2,
            "no sweep within the second: the count is the callers kept"
        );
    }

    #[tokio::test]
    async fn a_caller_past_its_share_waits_until_a_place_is_its_to_take() {
        let places = Shares::new(4, Activity::new());
        drop(places.take(peer(2), Instant::now()));
        let mut greedy: Vec<Taken> = (0..3)
            .map(|_| {
                places
                    .take(peer(1), Instant::now())
                    .expect("share, then borrowed")
            })
            .collect();
        let other = places.enter(peer(2)).await;
        let waiting = tokio::spawn({
            let places = Arc::clone(&places);
            async move { places.enter(peer(1)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "every place is taken");
        drop(other);
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "past its share, with only a quarter of the places free"
        );
        drop(greedy.pop());
        let third = waiting
            .await
            .expect("woken when its own place is given back");
        drop((greedy, third));
        assert_eq!(places.lock().in_use, 0);
    }

    #[test]
    fn the_rule_never_passes_the_cap_and_always_serves_a_caller_below_its_share() {
        for cap in 1..=16 {
            for active in 1..=5 {
                for in_use in 0..=cap {
                    for held in 0..=in_use {
                        let ok = may_take(held, in_use, cap, active);
                        if in_use == cap {
                            assert!(!ok);
                        } else if held < cap.div_ceil(active) {
                            assert!(ok, "{held} {in_use} {cap} {active}");
                        }
                    }
                }
            }
        }
    }
}
