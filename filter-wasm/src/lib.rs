//! keyflight's proxy-wasm adapter: the `cdylib` Envoy loads
//! (`target/wasm32-wasip1/release/keyflight_filter_wasm.wasm`).
//!
//! Every decision lives in the pure crate `keyflight-filter` (`filter/`): its
//! drivers, [`keyflight_filter::drive::worker::Root`] for the root context and
//! [`keyflight_filter::drive::stream::Stream`] for each HTTP stream, run the decisions and
//! perform them through the [`keyflight_filter::drive::host::Host`] trait. This crate forwards
//! each proxy-wasm callback to the driver (`contexts.rs`) and implements
//! `Host` with host calls and nothing else (`host.rs`), as
//! `docs/stream-machine.md#the-driver` describes. It is built for `wasm32`
//! only: natively it is an empty library, so the workspace builds and tests
//! without a proxy-wasm host.
//!
//! A panic kills the Wasm VM for every request on the worker, so the crate
//! denies `unwrap`, `expect`, `panic` and indexing (its `[lints]` table), and
//! installs a panic hook that logs the panic before the VM dies.

#[cfg(target_arch = "wasm32")]
mod contexts;
#[cfg(target_arch = "wasm32")]
mod host;
