//! keyflight's Envoy dynamic-module adapter: the `cdylib` Envoy loads through its HTTP
//! dynamic-module ABI (`libkeyflight_filter_native.so`), beside the proxy-wasm one.
//!
//! Every decision lives in the pure crate `keyflight-filter`: its drivers,
//! [`keyflight_filter::drive::worker::Root`] and [`keyflight_filter::drive::stream::Stream`],
//! run the decisions and perform them through [`keyflight_filter::drive::host::Host`], the
//! same trait `keyflight-filter-wasm` implements with proxy-wasm host calls. This crate
//! declares the part of the C ABI it uses (`abi.rs`), implements `Host` with it (`host.rs`)
//! and forwards each event hook to a driver (`hooks.rs`) behind a panic barrier
//! (`barrier.rs`), as `docs/stream-machine.md#the-driver` describes. Each worker's `Root`
//! is ticked from Envoy's main thread (`worker.rs`, `ticker.rs`,
//! `filter-native/README.md#the-outbox-and-renewals`) and sends its streams' coalesced
//! calls in turns that borrow one of them (`turn.rs`,
//! `filter-native/README.md#coalesced-calls`). What is not yet equal to the Wasm
//! filter is in `filter-native/README.md#not-yet-equal`.

mod abi;
mod barrier;
mod config_hooks;
mod hooks;
mod host;
mod plugin;
#[cfg(feature = "test-panic")]
mod test_panic;
mod ticker;
mod turn;
mod unreadable;
mod worker;
