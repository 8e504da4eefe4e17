//! keyflight's proxy-wasm HTTP filter: single-flight `Idempotency-Key`
//! execution at the Envoy edge (SPEC §3).
//!
//! The crate has two halves, in the shape of Kuadrant's wasm-shim:
//!
//! * the decisions, free of any proxy-wasm host call and tested natively:
//!   [`config`] (the validated plugin configuration), [`machine`] (the sans-IO
//!   state machine of one HTTP stream), and its pure helpers [`identity`],
//!   [`jwt_claims`], [`encoding`], [`replay`], [`router_retries`], [`problem`],
//!   [`status_matrix`], [`store_call`], [`outbox`], [`edge_cache`], [`epoch`]
//!   and [`metrics`];
//! * `adapter` (built for `wasm32` only): the thin glue that moves bytes
//!   between Envoy and the machine.
//!
//! A panic kills the Wasm VM for every request on the worker, so the wasm
//! build denies `unwrap`, `expect` and `panic` outright.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
// Tests state their expectations with `unwrap` and `panic!`.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::panic))]

pub mod config;
pub mod edge_cache;
pub mod encoding;
pub mod epoch;
pub mod identity;
pub mod jwt_claims;
pub mod machine;
pub mod metrics;
pub mod outbox;
pub mod problem;
pub mod replay;
pub mod router_retries;
pub mod status_matrix;
pub mod store_call;

#[cfg(target_arch = "wasm32")]
mod adapter;

pub use config::{Config, ConfigError, parse_plugin_config};
