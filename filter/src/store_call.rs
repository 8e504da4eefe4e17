//! The lease-store API v1 calls (`docs/records.md#the-api`) as data: what to
//! send, and how to read what came back.
//!
//! The state machine says *which* call to make ([`StoreCall`]); the drivers
//! wrap it in a [`Callout`] (method, path, headers, body, timeout) that the
//! host dispatches as it is. The host's report of the answer is read into an
//! [`Answer`] — status and body, nothing parsed — and the code that knows
//! which call is in flight parses it: [`parse_claim_answer`],
//! [`parse_ack_answer`], [`parse_epoch_answer`]. So every odd answer (no
//! headers, a 503, garbage JSON, a `lease_lost` problem) is a native unit test.
//!
//! One concern a module: [`StoreCall`] (`call.rs`), the routes it and the others take
//! (`route.rs`), the [`Callout`] the host dispatches (`callout.rs`), the host's
//! [`Answer`] and [`CallError`] (`answer.rs`), and the parsers (`parse.rs`).

mod answer;
mod call;
mod callout;
mod parse;
mod route;

pub use answer::{Answer, CallError, split_batch_answer};
pub use call::StoreCall;
pub use callout::Callout;
pub use parse::{parse_ack_answer, parse_claim_answer, parse_epoch_answer, parse_status};
pub use route::StoreRoute;

#[cfg(test)]
mod tests;
