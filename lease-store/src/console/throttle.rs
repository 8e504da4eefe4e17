//! The sign-in rate limit (`docs/console.md#signing-in`): after [`MAX_FAILURES`] refused
//! sign-ins from one peer address within [`WINDOW`], that address is answered `429` with
//! `Retry-After` until the oldest of them leaves the window, before its token is looked at.
//!
//! Tokens are long random strings, so this does not stop a guess that could succeed; it
//! keeps a script from spending the admin listener on guesses, and makes a flood of refused
//! sign-ins visible. Keyed by address, not port: a client reconnects on a new port. Everyone
//! behind one tunnel shares an address, and so one budget. Pure but for the lock: the time
//! comes in as an argument.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Refused sign-ins one address may make within [`WINDOW`].
pub const MAX_FAILURES: usize = 5;

/// The window the failures are counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Addresses remembered at most; past it, those whose failures all left the window are
/// forgotten first, then the one whose newest failure is oldest.
const MAX_PEERS: usize = 4096;

/// This replica's refused sign-ins, per peer address.
#[derive(Debug, Clone, Default)]
pub struct SignInThrottle(Arc<Mutex<HashMap<IpAddr, VecDeque<Instant>>>>);

impl SignInThrottle {
    /// `Ok` when `peer` may try to sign in at `now`; else how long until it may.
    pub fn admit(&self, peer: IpAddr, now: Instant) -> Result<(), Duration> {
        let peers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(failures) = peers.get(&peer) else {
            return Ok(());
        };
        let recent: Vec<&Instant> = failures.iter().filter(|at| within(**at, now)).collect();
        match recent.len() >= MAX_FAILURES {
            false => Ok(()),
            // The failure whose leaving the window brings the count under the limit.
            true => {
                Err(WINDOW.saturating_sub(now.duration_since(*recent[recent.len() - MAX_FAILURES])))
            }
        }
    }

    /// Counts a refused sign-in from `peer` at `now`; true when it is the one that makes
    /// `peer` wait.
    pub fn failed(&self, peer: IpAddr, now: Instant) -> bool {
        let mut peers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
            peers.retain(|_, failures| failures.back().is_some_and(|at| within(*at, now)));
            if peers.len() >= MAX_PEERS
                && let Some(stalest) = peers
                    .iter()
                    .min_by_key(|(_, failures)| failures.back().copied())
                    .map(|(peer, _)| *peer)
            {
                peers.remove(&stalest);
            }
        }
        let failures = peers.entry(peer).or_default();
        failures.retain(|at| within(*at, now));
        failures.push_back(now);
        while failures.len() > MAX_FAILURES {
            failures.pop_front();
        }
        failures.len() == MAX_FAILURES
    }

    /// Forgets `peer`'s failures: it signed in.
    pub fn succeeded(&self, peer: IpAddr) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&peer);
    }
}

/// Whether a failure at `at` still counts at `now`.
fn within(at: Instant, now: Instant) -> bool {
    now.saturating_duration_since(at) < WINDOW
}

/// `Retry-After` for a wait: whole seconds, rounded up, at least 1.
pub fn retry_after_seconds(wait: Duration) -> u64 {
    (wait.as_millis().div_ceil(1000) as u64).max(1)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const PEER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));

    #[test]
    fn the_sixth_try_within_a_minute_waits_for_the_first_failure_to_age_out() {
        let throttle = SignInThrottle::default();
        let start = Instant::now();
        for n in 0..MAX_FAILURES as u64 {
            let at = start + Duration::from_secs(n);
            assert_eq!(throttle.admit(PEER, at), Ok(()));
            throttle.failed(PEER, at);
        }
        let sixth = start + Duration::from_secs(10);
        assert_eq!(throttle.admit(PEER, sixth), Err(Duration::from_secs(50)));
        assert_eq!(
            throttle.admit(OTHER, sixth),
            Ok(()),
            "another address is not limited"
        );
        assert_eq!(throttle.admit(PEER, start + WINDOW), Ok(()));
        assert_eq!(
            throttle.admit(PEER, start + WINDOW - Duration::from_millis(1)),
            Err(Duration::from_millis(1))
        );
    }

    #[test]
    fn failures_outside_the_window_do_not_count_and_a_sign_in_clears_them() {
        let throttle = SignInThrottle::default();
        let start = Instant::now();
        for n in 0..MAX_FAILURES as u64 {
            throttle.failed(PEER, start + Duration::from_secs(n * 20));
        }
        assert_eq!(
            throttle.admit(PEER, start + Duration::from_secs(80)),
            Ok(())
        );
        for _ in 0..MAX_FAILURES {
            throttle.failed(PEER, start);
        }
        assert!(throttle.admit(PEER, start).is_err());
        throttle.succeeded(PEER);
        assert_eq!(throttle.admit(PEER, start), Ok(()));
    }

    #[test]
    fn remembered_addresses_are_bounded() {
        let throttle = SignInThrottle::default();
        let start = Instant::now();
        for n in 0..=MAX_PEERS as u32 {
            throttle.failed(
                IpAddr::V4(Ipv4Addr::from(n)),
                start + Duration::from_millis(n.into()),
            );
        }
        let peers = throttle.0.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(peers.len(), MAX_PEERS);
        assert!(
            !peers.contains_key(&IpAddr::V4(Ipv4Addr::from(0))),
            "the stalest went"
        );
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(49_001)), 50);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
    }
}
