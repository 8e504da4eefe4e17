//! Every plugin configuration keyflight ships is one the filter accepts.
//!
//! Operators copy these files verbatim, and a configuration the filter refuses fails plugin
//! start, which under `FAIL_CLOSED` is an outage of every guarded route. So every plugin JSON
//! in the repository goes through the filter's own validator ([`parse_plugin_config`]), the
//! same code `on_configure` runs.
//!
//! Where plugin configurations are found (relative to the workspace root):
//!
//! * YAML files under `envoy/` and `deploy/` (Envoy bootstraps, Istio `EnvoyFilter`s): every
//!   mapping whose `@type` is the Envoy Wasm HTTP filter, wherever it sits in the tree; its
//!   `config.configuration.value` is the plugin JSON (a `google.protobuf.StringValue`).
//! * Istio `WasmPlugin` objects in those files: `spec.pluginConfig`; Envoy Gateway
//!   `EnvoyExtensionPolicy` objects: each `spec.dynamicModule[].config`.
//! * Markdown under `envoy/` and `deploy/`, and the root `README.md`: fenced ```` ```json ````
//!   blocks whose top-level object has a `lease_store` key (that key makes it a plugin
//!   configuration), and fenced ```` ```yaml ```` blocks, searched like the YAML files.
//!   Annotated illustrations that are not meant to be valid JSON (with `//` comments) use
//!   ```` ```jsonc ```` and are not checked.
//!
//! Besides acceptance, the Istio manifests are held to what the Envoy facts require
//! (`docs/envoy-facts.md#configuration`, `docs/envoy-facts.md#pausing-and-buffering`): the
//! Wasm filter holds headers (`allow_on_headers_stop_iteration`), fails closed, reaches the
//! store through an Istio-named cluster, and each rollout stage's `keyflight.io/mode` label
//! says the mode its plugin runs in (`acceptance.rs`); and a shipped guarded route retries
//! only where the request never reached the upstream (`retries.rs`,
//! `docs/envoy-facts.md#router-retries`); the shipped AuthorizationPolicies admit exactly the
//! store calls the filter makes (`store_calls.rs`). `found.rs` finds the configurations.

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod acceptance;
mod found;
mod identity;
mod istio_authz;
mod retries;
mod store_calls;
mod workload_allowlist;
