//! Exactly-once effects for a service behind keyflight that keeps its effects in Postgres
//! (`docs/effects.md`).
//!
//! keyflight alone runs a guarded operation at least once: when the winning proxy dies
//! after the service committed, or the outcome is uncertain, a same-body retry runs it again
//! under a higher fence. The service closes that gap by recording, in the very transaction
//! that holds its writes, that the operation's effect committed and what it answered. A
//! re-run finds the record and answers with it instead of committing its writes a second
//! time.
//!
//! ```no_run
//! # async fn handler(client: &mut tokio_postgres::Client, headers: &http::HeaderMap)
//! # -> Result<serde_json::Value, Box<dyn std::error::Error>> {
//! use keyflight_effects::{Committed, Operation, commit};
//!
//! let operation = Operation::from_headers(headers)?.ok_or("not guarded by keyflight")?;
//! let tx = client.transaction().await?;
//! tx.execute("INSERT INTO payments (amount) VALUES (10)", &[]).await?;
//! let answer = serde_json::json!({"status": 201, "body": {"amount": 10}});
//! Ok(match commit(tx, &operation, &answer).await? {
//!     Committed::Now => answer,
//!     // An earlier run's writes committed; this run's were rolled back.
//!     Committed::Earlier { answer, .. } => answer,
//! })
//! # }
//! ```
//!
//! With the `axum` feature, [`Operation`] is also an extractor: `Option<Operation>` for a
//! handler that serves unguarded requests too, `Operation` for one that must not.
//!
//! The record is kept by one SQL function, [`MIGRATION`] (also shipped as
//! `effects/migrations/V1__keyflight_effects.sql` for services in other languages); this crate
//! only calls it, so the Rust and SQL forms cannot disagree.

#[cfg(any(feature = "axum", test))]
mod extract;
mod ledger;
mod operation;

#[cfg(any(feature = "axum", test))]
pub use extract::OperationRejection;
pub use ledger::{Committed, Error, MIGRATION, commit, install};
pub use operation::{FENCE_HEADER, InvalidOperation, Operation, SCOPE_HEADER};
