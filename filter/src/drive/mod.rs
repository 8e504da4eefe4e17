//! The drivers: they run the pure decisions and perform what those ask
//! through the [`host::Host`] trait (`docs/stream-machine.md#the-driver`).
//!
//! Everything outside this folder decides; everything inside it drives:
//! [`stream::Stream`] runs one HTTP stream's [`crate::machine::Machine`],
//! [`worker::Root`] runs a worker's root context (configuration, the tick,
//! the record outbox, the operator epoch). `keyflight-filter-wasm` implements
//! [`host::Host`] with proxy-wasm host calls, `keyflight-filter-native` with Envoy's
//! dynamic-module ABI; the native tests with a fake host.

pub mod herd;
pub mod host;
pub mod stream;
pub mod worker;

#[cfg(test)]
mod coalesced_tests;
#[cfg(test)]
mod herd_tests;
#[cfg(test)]
mod repeated_warnings_tests;
