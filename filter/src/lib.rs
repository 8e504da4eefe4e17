//! keyflight's edge filter, the decisions: single-flight `Idempotency-Key`
//! execution at the Envoy edge (`docs/stream-machine.md`, `docs/data-path.md`).
//!
//! This crate has no proxy-wasm dependency at all, in the shape of Kuadrant's
//! wasm-shim: every decision is here and tested natively —
//! [`config`] (the validated plugin configuration), [`machine`] (the sans-IO
//! state machine of one HTTP stream), and its pure helpers [`identity`],
//! [`jwt_claims`], [`encoding`], [`replay`], [`router_retries`], [`problem`],
//! [`status_matrix`], [`store_call`], [`outbox`], [`body_memo`], [`edge_cache`], [`epoch`],
//! [`metrics`] and [`contract`] (what a guarded route answers, for documenting
//! it). The thin `cdylib` Envoy loads, `keyflight-filter-wasm` (`filter-wasm/`),
//! moves bytes between the host and these decisions.
//!
//! A panic kills the Wasm VM for every request on the worker, so the crate
//! denies `unwrap`, `expect`, `panic` and indexing outside tests (the
//! `[lints]` table in its `Cargo.toml`).

pub mod body_memo;
pub mod coalesce;
pub mod config;
pub mod contract;
pub mod drive;
pub mod edge_cache;
pub mod encoding;
pub mod epoch;
pub mod guarantee;
pub mod identity;
pub mod jwt_claims;
pub mod log;
pub mod machine;
pub mod metrics;
pub mod outbox;
pub mod problem;
pub mod recipe;
pub mod reconcile;
pub mod recorded_headers;
pub mod replay;
pub mod router_retries;
pub mod status_matrix;
pub mod store_call;
#[cfg(test)]
mod testing;

pub use config::{Config, ConfigError, parse_plugin_config};
