//! The effect ledger: the one statement a handler's transaction ends with.
//!
//! [`commit`] takes the handler's transaction by value and ends it itself, so a caller
//! cannot keep a re-run's writes by mistake: it commits when this run recorded the
//! operation's answer and rolls back when an earlier run had (`docs/effects.md#the-protocol`).

use serde_json::Value;
use tokio_postgres::{GenericClient, Transaction};

use crate::operation::Operation;

/// The ledger's table and function, as plain SQL (idempotent: run it at every start).
pub const MIGRATION: &str = include_str!("../migrations/V1__keyflight_effects.sql");

/// The function's call: the concurrency argument lives with it, in [`MIGRATION`].
const COMMIT: &str = "SELECT recorded, fence, answer FROM keyflight_effect_commit($1, $2, $3)";

/// How an operation's effect stands once [`commit`] returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Committed {
    /// This run's writes committed together with its answer.
    Now,
    /// An earlier run of the operation had committed: this run's writes were rolled back,
    /// and the request should be answered with the earlier run's `answer`.
    Earlier {
        /// The fence of the run that committed.
        fence: i64,
        /// What it answered.
        answer: Value,
    },
}

/// Why the ledger could not be read or written. The handler's transaction is gone (rolled
/// back by Postgres or when it dropped), so nothing of this run committed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Postgres refused or the connection failed.
    #[error("effect ledger: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// The function answered something else than one row (an older or edited function).
    #[error("effect ledger: keyflight_effect_commit answered {0} rows, not one")]
    UnexpectedRows(usize),
}

/// Creates (or updates) the ledger's table and function, in one transaction (so instances
/// that start together take turns on [`MIGRATION`]'s lock).
pub async fn install(client: &impl GenericClient) -> Result<(), Error> {
    client
        .batch_execute(&format!("BEGIN;\n{MIGRATION}\nCOMMIT;"))
        .await?;
    Ok(())
}

/// Records `answer` as `operation`'s effect in `tx` and ends `tx`: commits it when this
/// run is the first to record the operation ([`Committed::Now`]), rolls it back when an
/// earlier run already committed ([`Committed::Earlier`], with what that run answered).
///
/// Call it last in the transaction, after every write of the operation's effect. A
/// concurrent run of the same operation waits here until this one ends.
pub async fn commit(
    tx: Transaction<'_>,
    operation: &Operation,
    answer: &Value,
) -> Result<Committed, Error> {
    let rows = tx
        .query(COMMIT, &[&operation.scope(), &operation.fence(), answer])
        .await?;
    let [row] = rows.as_slice() else {
        return Err(Error::UnexpectedRows(rows.len()));
    };
    if row.try_get::<_, bool>("recorded")? {
        tx.commit().await?;
        return Ok(Committed::Now);
    }
    let earlier = Committed::Earlier {
        fence: row.try_get("fence")?,
        answer: row.try_get("answer")?,
    };
    tx.rollback().await?;
    Ok(earlier)
}
