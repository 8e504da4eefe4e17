//! One worker thread's plugin, as the root context sees it: the validated
//! configuration, the record outbox, the operator epoch — and the driver of
//! the root context's callbacks (`docs/record-outbox.md`,
//! `docs/stream-machine.md#the-driver`).
//!
//! [`Worker`] is what a worker's streams share: the configuration they were
//! created under, the worker's [`Outbox`](crate::outbox::Outbox) (F4, F14) and its view of the
//! lease-store's operator epoch (F9). [`Root`] drives the root context:
//! `on_configure` builds a new `Worker` (the outbox stays: a reconfigured
//! plugin keeps its claims), `on_tick` asks for the epoch and runs the
//! outbox's due calls, `on_http_call_response` reads their answers, and
//! `on_done` keeps a retired plugin alive until its outbox is empty. Like the
//! stream driver it performs everything through the [`Host`](super::host::Host) trait, so the
//! adapter only forwards each callback.
//!
//! Workers share nothing but Envoy's stats and shared data: each root
//! context sees only its own streams (`docs/envoy-facts.md#ticks`).
//!
//! Two modules: `shared.rs` holds [`Worker`], `root.rs` holds [`Root`].

mod root;
mod shared;

pub use root::{MAX_HANDED_PER_CALLBACK, Root};
pub use shared::Worker;

#[cfg(test)]
mod tests;
