//! One configuration of the filter ([`Plugin`]), shared by every worker: its JSON, its
//! counters and gauges, each worker's root driver and the configuration's callouts in flight
//! (`filter-native/README.md#the-outbox-and-renewals`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use keyflight_filter::drive::host::CalloutAnswered;
use keyflight_filter::metrics::{Gauge, Metric};

use crate::abi::{EnvoyConfig, EnvoyFilter};
use crate::host::CallAnswer;
use crate::worker::Slot;

/// One configuration of the filter, shared by every worker: the plugin JSON, the ids of
/// its counters and gauges, each worker's root driver, and which of them sent each
/// callout of the configuration in flight.
#[derive(Debug)]
pub struct Plugin {
    /// Which configuration: each worker keeps its own driver per configuration.
    pub id: u64,
    json: Vec<u8>,
    pub(crate) counters: HashMap<Metric, usize>,
    pub(crate) gauges: HashMap<Gauge, usize>,
    pub(crate) config: EnvoyConfig,
    slots: Mutex<Vec<Arc<Slot>>>,
    calls: Mutex<HashMap<u64, Arc<Slot>>>,
    /// The slot dispatching a callout now, and whether Envoy answered it already: it may
    /// answer one that fails before it returns its id.
    dispatching: Mutex<Option<(Arc<Slot>, bool)>>,
    /// Envoy is destroying the configuration: no callout goes through it any more.
    closed: AtomicBool,
}

/// Root drivers of destroyed configurations whose outboxes still hold claims: the
/// configurations that remain tick them, as Envoy keeps ticking a retired Wasm root context,
/// until they are settled (`filter-native/README.md#the-outbox-and-renewals`).
static RETIRED: LazyLock<Mutex<Vec<Arc<Slot>>>> = LazyLock::new(Mutex::default);

impl Plugin {
    /// The configuration's JSON, as Envoy gave it.
    pub fn json_bytes(&self) -> &[u8] {
        &self.json
    }

    /// The configuration `json`, with every keyflight counter and gauge defined in `envoy`.
    pub fn define(id: u64, json: Vec<u8>, envoy: EnvoyConfig) -> Self {
        let counters = Metric::all()
            .filter_map(|m| envoy.define(&m.name(), false).map(|id| (m, id)))
            .collect();
        let gauges = Gauge::ALL
            .into_iter()
            .filter_map(|g| envoy.define(g.name(), true).map(|id| (g, id)))
            .collect();
        Plugin {
            id,
            json,
            counters,
            gauges,
            config: envoy,
            slots: Mutex::default(),
            calls: Mutex::default(),
            dispatching: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// A configuration with no Envoy behind it and no metrics, for unit tests.
    #[cfg(test)]
    pub fn detached() -> Self {
        Plugin {
            id: 0,
            json: b"{}".to_vec(),
            counters: HashMap::new(),
            gauges: HashMap::new(),
            config: EnvoyConfig(std::ptr::null_mut()),
            slots: Mutex::default(),
            calls: Mutex::default(),
            dispatching: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// A worker's root driver of this configuration, ticked from now on.
    pub fn adopt(&self, slot: &Arc<Slot>) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(slot));
    }

    /// Ticks every worker's root driver, and the retired ones still settling their
    /// outboxes (on the main thread).
    pub fn tick(&self) {
        let slots = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let retired = RETIRED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for slot in slots.iter().chain(&retired) {
            slot.tick(self);
        }
        RETIRED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|slot| !slot.settled());
    }

    /// Envoy destroys the configuration (on the main thread): each worker's root driver is
    /// retired, the calls it had in flight fail (Envoy drops them unanswered, and the outbox
    /// sends them again), and one whose outbox still holds claims is left to the
    /// configurations that remain.
    pub fn retire(&self) {
        self.closed.store(true, Ordering::Relaxed);
        let slots = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let draining: Vec<Arc<Slot>> = slots
            .into_iter()
            .filter(|slot| !slot.retire(self))
            .collect();
        let in_flight: Vec<(u64, Arc<Slot>)> = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        for (id, slot) in in_flight {
            if let Ok(token) = u32::try_from(id) {
                let failed = CalloutAnswered {
                    token,
                    num_headers: 0,
                    body_size: 0,
                };
                slot.answer(self, failed, CallAnswer::default());
            }
        }
        RETIRED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(draining);
    }

    /// The worker whose root driver sent callout `id` (on the main thread).
    pub fn caller(&self, id: u64) -> Option<Arc<Slot>> {
        let sent = self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        sent.or_else(|| {
            let mut dispatching = self
                .dispatching
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (slot, answered) = dispatching.as_mut()?;
            *answered = true;
            Some(Arc::clone(slot))
        })
    }

    /// Sends a callout of the configuration for `slot`'s root driver (on the main thread).
    pub(crate) fn root_callout(
        &self,
        slot: &Arc<Slot>,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, i32> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(CALLOUT_CLOSED);
        }
        *self
            .dispatching
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Arc::clone(slot), false));
        let sent = self.config.http_callout(cluster, headers, body, timeout_ms);
        let answered = self
            .dispatching
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .is_some_and(|(_, answered)| answered);
        if let Ok(id) = sent
            && !answered
        {
            self.calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, Arc::clone(slot));
        }
        sent
    }

    /// Counts `metric` on `filter`'s stream.
    pub fn count(&self, filter: EnvoyFilter, metric: Metric) {
        if let Some(&id) = self.counters.get(&metric) {
            filter.increment_counter(id, 1);
        }
    }
}

/// What a callout through a configuration Envoy is destroying is refused with (not one of
/// Envoy's results).
const CALLOUT_CLOSED: i32 = -1;
