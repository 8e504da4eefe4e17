//! Specification tests for `keyflight-protocol`, one module per requirement.
//!
//! The same binary runs natively (`cargo test`) and as `wasm32-unknown-unknown`
//! under Node (`scripts/protocol-wasm-test.sh`): there, each module imports
//! `wasm_bindgen_test` as `test`, so every `#[test]` below becomes a
//! `#[wasm_bindgen_test]` and the filter's build is held to the same answers.

// An integration test is test code: its helpers may state expectations with these too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod fingerprint;
mod jcs;
mod key;
mod scope;
mod vectors;
mod wire;
