//! keyflight's lease-store: claims, renews and finalizes idempotency leases over Postgres.
//!
//! The crate is one binary (`lease-store`, see `main.rs`) built from small
//! modules with one job each:
//!
//! - [`store`], [`longpoll`], [`cleanup`]: the Postgres layer (SQL next to the
//!   Rust that runs it), the `LISTEN/NOTIFY` fan-out for waiting followers
//!   (L4), and retention clean-up (L5); [`db`] turns the database URL into
//!   connection settings and the TLS connector all of them connect with.
//! - [`api`]: the HTTP API v1 (`docs/records.md#the-api`), one handler file per call family,
//!   guarded by [`auth`] (L7: [`access`] for bearer tokens, [`caller`] for the mesh
//!   identity that namespaces each workload's records), with every error mapped to problem+json by
//!   the API's error type ([`api::error`]); [`metrics`] and [`openapi`] are
//!   the operability endpoints (L8).
//! - [`console`]: the operator's console, HTML pages on the admin listener beside the
//!   records API (`docs/console.md`).
//! - [`settings`] parses flags and environment into validated plain data once, at
//!   start-up; [`access`] builds the live credentials from them (token set, workloads,
//!   operators' tokens, each re-reading its file when it changes); [`shutdown`] turns
//!   SIGTERM/SIGINT into a drain of in-flight calls.
//! - [`logging`] sets up the subscriber and caps the dependencies that could
//!   print bodies or headers, whatever `RUST_LOG` says (L7).
//! - [`cli`]: the subcommands (`serve`, `migrate`, `records …`, `fingerprint`).

pub mod access;
pub mod api;
pub mod auth;
pub mod caller;
pub mod cleanup;
pub mod cli;
pub mod console;
pub mod db;
pub mod evidence;
pub mod log_limit;
pub mod logging;
pub mod longpoll;
pub mod metrics;
pub mod openapi;
pub mod quota;
pub mod server;
pub mod settings;
pub mod shares;
pub mod shutdown;
pub mod store;
