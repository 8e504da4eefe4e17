//! Exactly-once effects for a service behind keyflight that keeps its effects in Postgres
//! (`docs/effects.md`).
//!
//! Under `uncertain: retry` keyflight alone runs a guarded operation at least once: when the
//! winning proxy dies after the service committed, or the outcome is uncertain, a same-body
//! retry runs it again under a higher fence (the default, `uncertain: hold`, holds the key for
//! an operator instead). The service closes that gap by recording, in the very transaction
//! that holds its writes, that the operation's effect committed and what it answered. A
//! re-run finds the record first thing and answers with it instead of doing the work again.
//!
//! ```no_run
//! # async fn handler(client: &mut tokio_postgres::Client, headers: &http::HeaderMap, body: &[u8])
//! # -> Result<serde_json::Value, Box<dyn std::error::Error>> {
//! # let fingerprint_of = |body: &[u8]| format!("{}", body.len());
//! use keyflight_effects::{Begun, Committed, Operation, begin, commit};
//!
//! let operation = Operation::from_headers(headers)?.ok_or("not guarded by keyflight")?;
//! // What makes this request this payment: the same for a retry, not for another body.
//! let fingerprint = fingerprint_of(body);
//! let tx = client.transaction().await?;
//! if let Begun::Earlier { answer, .. } = begin(&tx, &operation, &fingerprint).await? {
//!     return Ok(answer); // paid already: no second call to the provider
//! }
//! // … the payment provider's call, with the scope as its idempotency key …
//! tx.execute("INSERT INTO payments (amount) VALUES (10)", &[]).await?;
//! let answer = serde_json::json!({"status": 201, "body": {"amount": 10}});
//! Ok(match commit(tx, &operation, &fingerprint, &answer).await? {
//!     Committed::Now => answer,
//!     // An earlier run's writes committed; this run's were rolled back.
//!     Committed::Earlier { answer, .. } => answer,
//! })
//! # }
//! ```
//!
//! With the `axum` feature, [`Operation`] is also an extractor (`Option<Operation>` for a
//! handler that serves unguarded requests too, `Operation` for one that must not), and
//! [`Error`] an answer (409 for [`Error::Conflict`]), and the module
//! `keyflight_effects::reconcile` serves keyflight's question about an uncertain run
//! ([`reconcile()`] is that question, asked of the ledger; `docs/effects.md#reconciliation`).
//! With the `sqlx` feature, `keyflight_effects::sqlx` holds the same calls for an sqlx
//! transaction.
//!
//! The record is kept by SQL functions, [`MIGRATION`] (also shipped as
//! `effects/migrations/` for services in other languages); this crate only calls them, so
//! the Rust and SQL forms cannot disagree.

#[cfg(any(feature = "axum", test))]
mod extract;
mod ledger;
mod operation;
mod postgres;
#[cfg(any(feature = "axum", test))]
pub mod reconcile;
#[cfg(any(feature = "axum", test))]
mod response;
#[cfg(feature = "sqlx")]
pub mod sqlx;

#[cfg(any(feature = "axum", test))]
pub use extract::OperationRejection;
pub use ledger::{Begun, Committed, Error, MIGRATION, Reconciled};
pub use operation::{FENCE_HEADER, InvalidOperation, Operation, SCOPE_HEADER};
pub use postgres::{begin, commit, install, reconcile};
