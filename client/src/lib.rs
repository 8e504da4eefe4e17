//! `keyflight`, the client command: send one request with an `Idempotency-Key`
//! and retry it without ever running it twice; and the tools about the filter's
//! configuration, which read it with the filter's own parser:
//!
//! - [`fingerprint`]: a request's canonical form, fingerprint and scope (K5);
//! - [`recipe_diff`]: what a plugin configuration change does to identities;
//! - [`openapi_overlay`]: the guarded operations' contract written into a service's
//!   OpenAPI document.
//!
//! The command is I/O at the edges and plain decisions inside, each in its
//! own module and unit-tested:
//!
//! - [`input`]: the command line's request — headers, body source, the key
//!   (validated with the same rule the filter applies, or generated);
//! - [`retry`]: whether an answer is worth another try with the same key, and
//!   how long to wait (`Retry-After` as seconds or an HTTP-date, capped);
//! - [`outcome`]: which exit code an answer maps to;
//! - [`report`]: the one JSON document printed at the end.
//!
//! `main.rs` parses flags, sends, sleeps and prints.

pub mod fingerprint;
pub mod input;
pub mod openapi_overlay;
pub mod outcome;
pub mod recipe_diff;
pub mod report;
pub mod retry;
