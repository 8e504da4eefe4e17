//! End-to-end harness: the real Envoy running the real `.wasm`, the real lease-store over a
//! real Postgres, and the demo upstream that counts how often a payment actually ran.
//!
//! A scenario starts a [`Stack`] (each test its own: Envoy starts in about a second and a
//! throwaway Postgres in about two, and separate stacks keep counters and records from
//! leaking between tests), sends requests through Envoy, and asserts on what the caller got
//! *and* on what happened behind the edge: upstream executions ([`Stack::upstream_executions`])
//! and lease-store counters ([`Stack::store_metrics`]).
//!
//! The stack itself is the one launcher's (`keyflight_testkit::stack`): Envoy's config is
//! rendered from the shipped `envoy/*.yaml` with only ports, the wasm path and the plugin
//! JSON swapped, so the file users run is the file the tests prove. Scenarios beyond the
//! demo shape use its options (two replicas, a replicated Postgres, Envoy edits for
//! `jwt_authn`, an mTLS listener or a short route timeout, a listener served from a file)
//! and the tokens and certificates those need ([`jwt`], [`mtls`]).
//!
//! The binaries are not built by `cargo test -p keyflight-e2e`: `make test` builds them
//! first. `keyflight_testkit::binaries` says where they are looked for and how to override
//! that.

pub mod jwt;
pub mod mtls;
pub mod raw_http;
pub mod reply;
pub mod retry;
pub mod stack;

pub use reply::Reply;
pub use retry::retry_while_refused;
pub use stack::{Stack, StackOptions};
