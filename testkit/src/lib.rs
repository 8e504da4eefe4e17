//! The one stack launcher and keyflight's test support.
//!
//! [`stack`] starts and stops any keyflight deployment the project needs (Postgres or a
//! Patroni pair, lease-store replicas, the demo upstream, Envoys running the real `.wasm`):
//! `make up` / `make demo` through the `keyflight-stack` binary, the end-to-end tests,
//! `make chaos` and `make bench` all run it. Beneath it: throwaway Postgres clusters
//! ([`pg`], [`ha`], [`database`]), supervised child processes ([`process`]), where the
//! programs are ([`binaries`]), and the shipped Envoy configs rendered for a stack
//! ([`envoy_config`], [`envoy_variants`], [`lds`]), network namespaces whose links can be
//! cut ([`net`]), a previous release built from git history for the upgrade tests
//! ([`previous_release`]), and the files keyflight ships as tests read them ([`shipped`]).

pub mod binaries;
pub mod database;
pub mod envoy_config;
pub mod envoy_variants;
pub mod ha;
pub mod lds;
pub mod metrics;
pub mod net;
mod os;
pub mod pg;
pub mod pki;
pub mod previous_release;
pub mod process;
pub mod shipped;
pub mod stack;
pub mod yaml_lines;
