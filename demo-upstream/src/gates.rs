//! Named gates that hold payment handlers until a test opens them.
//!
//! A handler called with `?hold=NAME` waits at gate `NAME`; `POST /gates/NAME/open` opens
//! it for good (a latch: handlers arriving later pass straight through, so opening early
//! is never a lost wake-up). `GET /gates/NAME` reports how many handlers are waiting, so a
//! test can wait for "the winner is parked" before it sends followers, with no sleeps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::watch;

/// What `GET /gates/NAME` answers.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GateStatus {
    /// Handlers currently parked at the gate.
    pub waiting: usize,
    /// Whether the gate has been opened.
    pub open: bool,
}

#[derive(Debug)]
struct Gate {
    waiting: usize,
    open: watch::Sender<bool>,
}

impl Gate {
    fn new() -> Self {
        Gate {
            waiting: 0,
            open: watch::Sender::new(false),
        }
    }
}

/// All gates, created on first use.
#[derive(Debug, Default, Clone)]
pub struct Gates {
    inner: Arc<Mutex<HashMap<String, Gate>>>,
}

impl Gates {
    /// Waits at gate `name` until it is open. The waiter is counted while it waits, also
    /// when the client goes away mid-wait (the count drops when the future is dropped).
    pub async fn pass(&self, name: &str) {
        let mut open = {
            let mut gates = self.lock();
            let gate = gates.entry(name.to_owned()).or_insert_with(Gate::new);
            gate.waiting += 1;
            gate.open.subscribe()
        };
        let _waiting = WaitingGuard {
            gates: self.clone(),
            name: name.to_owned(),
        };
        // The sender lives in the map for the life of the process, so this only ends when
        // the gate opens; an error would mean the sender is gone, which also lets us pass.
        let _ = open.wait_for(|is_open| *is_open).await;
    }

    /// Opens gate `name` (creating it open if nobody waited yet).
    pub fn open(&self, name: &str) {
        let mut gates = self.lock();
        let gate = gates.entry(name.to_owned()).or_insert_with(Gate::new);
        gate.open.send_replace(true);
    }

    /// Opens every gate (used at shutdown).
    pub fn open_all(&self) {
        for gate in self.lock().values() {
            gate.open.send_replace(true);
        }
    }

    /// How many handlers wait at gate `name`, and whether it is open.
    pub fn status(&self, name: &str) -> GateStatus {
        let gates = self.lock();
        gates.get(name).map_or(
            GateStatus {
                waiting: 0,
                open: false,
            },
            |gate| GateStatus {
                waiting: gate.waiting,
                open: *gate.open.borrow(),
            },
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Gate>> {
        // Counters only: a poisoned lock holds nothing half-written that matters.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Decrements a gate's waiting count when its waiter leaves, however it leaves.
struct WaitingGuard {
    gates: Gates,
    name: String,
}

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        if let Some(gate) = self.gates.lock().get_mut(&self.name) {
            gate.waiting = gate.waiting.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_is_counted_until_the_gate_opens() {
        let gates = Gates::default();
        let waiter = tokio::spawn({
            let gates = gates.clone();
            async move { gates.pass("g").await }
        });
        while gates.status("g").waiting == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        gates.open("g");
        waiter
            .await
            .expect("the waiter finishes once the gate opens");
        let status = gates.status("g");
        assert_eq!(status.waiting, 0);
        assert!(status.open);
    }

    #[tokio::test]
    async fn an_open_gate_lets_late_arrivals_through() {
        let gates = Gates::default();
        gates.open("g");
        gates.pass("g").await;
        assert_eq!(gates.status("g").waiting, 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_is_no_longer_counted() {
        let gates = Gates::default();
        let waiter = tokio::spawn({
            let gates = gates.clone();
            async move { gates.pass("g").await }
        });
        while gates.status("g").waiting == 0 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(gates.status("g").waiting, 0);
    }
}
