//! The ledger in a `tokio-postgres` transaction: [`begin`] first, [`commit`] last; and
//! [`reconcile`], keyflight's question about an uncertain run, in a transaction of its own.
//!
//! [`commit`] takes the handler's transaction by value and ends it itself, so a caller
//! cannot keep a re-run's writes by mistake: it commits when this run recorded the
//! operation's answer and rolls back otherwise (`docs/effects.md#the-protocol`).

use serde_json::Value;
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::ledger::{
    BEGIN, Begun, COMMIT, Committed, Error, MIGRATION, RECONCILE, Reconciled, decide, reconciled,
};
use crate::operation::Operation;

/// Creates (or updates) the ledger's table and functions, in one transaction (so instances
/// that start together take turns on [`MIGRATION`]'s lock).
pub async fn install(client: &impl GenericClient) -> Result<(), Error> {
    client
        .batch_execute(&format!("BEGIN;\n{MIGRATION}\nCOMMIT;"))
        .await?;
    Ok(())
}

/// The early check, first in the handler's transaction `tx`: [`Begun::Earlier`] when a run
/// of `operation` already committed (answer with its answer, before calling anyone),
/// [`Begun::Run`] otherwise, `tx` then holding the operation until it ends.
///
/// `fingerprint` is what the service derives from the request and would differ for another
/// request under the same key (`docs/effects.md#the-fingerprint`); [`Error::Conflict`] when
/// another one committed under this scope.
pub async fn begin(
    tx: &Transaction<'_>,
    operation: &Operation,
    fingerprint: &str,
) -> Result<Begun, Error> {
    let (outcome, fence, answer) = one_row(
        tx.query(
            BEGIN,
            &[&operation.scope(), &operation.fence(), &fingerprint],
        )
        .await?,
    )?;
    Ok(match decide("run", &outcome, fence, answer)? {
        None => Begun::Run,
        Some((fence, answer)) => Begun::Earlier { fence, answer },
    })
}

/// Records `answer` as `operation`'s effect in `tx` and ends `tx`: commits it when this
/// run is the first to record the operation ([`Committed::Now`]), rolls it back when an
/// earlier run already committed ([`Committed::Earlier`], with what that run answered) or
/// on [`Error::Conflict`].
///
/// Call it last in the transaction, after every write of the operation's effect, with the
/// fingerprint given to [`begin`] (if it was called). A concurrent run of the same operation
/// waits here (or in [`begin`]) until this one ends.
pub async fn commit(
    tx: Transaction<'_>,
    operation: &Operation,
    fingerprint: &str,
    answer: &Value,
) -> Result<Committed, Error> {
    let (outcome, fence, earlier) = one_row(
        tx.query(
            COMMIT,
            &[&operation.scope(), &operation.fence(), &fingerprint, answer],
        )
        .await?,
    )?;
    match decide("recorded", &outcome, fence, earlier) {
        Ok(None) => {
            tx.commit().await.map_err(uncertain_unless_refused)?;
            Ok(Committed::Now)
        }
        Ok(Some((fence, answer))) => {
            tx.rollback().await?;
            Ok(Committed::Earlier { fence, answer })
        }
        // Dropping `tx` rolls it back.
        Err(e) => Err(e),
    }
}

/// What became of `operation`: [`Reconciled::Committed`] when a run of it committed (after
/// waiting for a run in flight to end), [`Reconciled::Absent`] when none did, the ledger then
/// refusing every run whose fence is `operation`'s or lower (`docs/effects.md#reconciliation`).
///
/// It takes the client, not a transaction, because the answer holds only once its own
/// transaction committed: `Absent` is returned after COMMIT succeeded, and a COMMIT whose
/// fate is unknown is [`Error::Uncertain`].
pub async fn reconcile(client: &mut Client, operation: &Operation) -> Result<Reconciled, Error> {
    let tx = client.transaction().await?;
    let (outcome, fence, answer) = one_row(
        tx.query(RECONCILE, &[&operation.scope(), &operation.fence()])
            .await?,
    )?;
    let answer = reconciled(&outcome, fence, answer)?;
    tx.commit().await.map_err(uncertain_unless_refused)?;
    Ok(answer)
}

/// A failed COMMIT: refused by Postgres (nothing committed), or [`Error::Uncertain`].
fn uncertain_unless_refused(e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(_) => Error::Database(e),
        None => Error::Uncertain(Box::new(e)),
    }
}

/// The function's one row: its outcome, fence and answer.
fn one_row(rows: Vec<tokio_postgres::Row>) -> Result<(String, i64, Option<Value>), Error> {
    let [row] = rows.as_slice() else {
        return Err(Error::Unexpected(format!("{} rows, not one", rows.len())));
    };
    Ok((
        row.try_get("outcome")?,
        row.try_get("fence")?,
        row.try_get("answer")?,
    ))
}
