//! The ledger in an sqlx transaction (feature `sqlx`): the same calls as the
//! `tokio-postgres` form (`postgres.rs`), for services built on sqlx
//! (`docs/effects.md#sqlx`).
//!
//! The answer crosses as JSON text, so the feature needs none of sqlx's own JSON support.

use serde_json::Value;
use sqlx::{PgConnection, Postgres, Row as _, Transaction};

use crate::ledger::{Begun, Committed, Error, MIGRATION, Reconciled, decide, reconciled};
use crate::operation::Operation;

/// `crate::ledger`'s calls, the answer crossing as text both ways.
const BEGIN: &str =
    "SELECT outcome, fence, answer::text AS answer FROM keyflight_effect_begin($1, $2, $3)";
const COMMIT: &str = "SELECT outcome, fence, answer::text AS answer \
                      FROM keyflight_effect_commit($1, $2, $3, $4::text::jsonb)";
const RECONCILE: &str =
    "SELECT outcome, fence, answer::text AS answer FROM keyflight_effect_reconcile($1, $2)";

/// [`crate::install`] for sqlx: creates (or updates) the ledger's table and functions, in
/// one transaction.
pub async fn install(connection: &mut PgConnection) -> Result<(), Error> {
    sqlx::raw_sql(&format!("BEGIN;\n{MIGRATION}\nCOMMIT;"))
        .execute(connection)
        .await?;
    Ok(())
}

/// [`crate::begin`] for sqlx: the early check, first in the handler's transaction.
pub async fn begin(
    tx: &mut Transaction<'_, Postgres>,
    operation: &Operation,
    fingerprint: &str,
) -> Result<Begun, Error> {
    let row = sqlx::query(BEGIN)
        .bind(operation.scope())
        .bind(operation.fence())
        .bind(fingerprint)
        .fetch_one(&mut **tx)
        .await?;
    Ok(match decide_row("run", &row)? {
        None => Begun::Run,
        Some((fence, answer)) => Begun::Earlier { fence, answer },
    })
}

/// [`crate::commit`] for sqlx: records `answer` last in `tx` and ends `tx` as the outcome
/// says.
pub async fn commit(
    mut tx: Transaction<'_, Postgres>,
    operation: &Operation,
    fingerprint: &str,
    answer: &Value,
) -> Result<Committed, Error> {
    let row = sqlx::query(COMMIT)
        .bind(operation.scope())
        .bind(operation.fence())
        .bind(fingerprint)
        .bind(answer.to_string())
        .fetch_one(&mut *tx)
        .await?;
    match decide_row("recorded", &row) {
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

/// [`crate::reconcile()`] for sqlx: what became of `operation`, in a transaction of its own
/// that has committed when this returns [`Reconciled::Absent`].
pub async fn reconcile(
    connection: &mut PgConnection,
    operation: &Operation,
) -> Result<Reconciled, Error> {
    let mut tx = sqlx::Connection::begin(connection).await?;
    let row = sqlx::query(RECONCILE)
        .bind(operation.scope())
        .bind(operation.fence())
        .fetch_one(&mut *tx)
        .await?;
    let (outcome, fence, answer) = parts(&row)?;
    let answer = reconciled(&outcome, fence, answer)?;
    tx.commit().await.map_err(uncertain_unless_refused)?;
    Ok(answer)
}

/// A failed COMMIT: refused by Postgres (nothing committed), or [`Error::Uncertain`].
fn uncertain_unless_refused(e: sqlx::Error) -> Error {
    match e {
        sqlx::Error::Database(_) => Error::Sqlx(e),
        e => Error::Uncertain(Box::new(e)),
    }
}

/// [`decide`] on the function's row.
fn decide_row(go: &str, row: &sqlx::postgres::PgRow) -> Result<Option<(i64, Value)>, Error> {
    let (outcome, fence, answer) = parts(row)?;
    decide(go, &outcome, fence, answer)
}

/// The function's row: its outcome, fence and answer (JSON text back to a value).
fn parts(row: &sqlx::postgres::PgRow) -> Result<(String, i64, Option<Value>), Error> {
    let answer = row
        .try_get::<Option<String>, _>("answer")?
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| Error::Unexpected(format!("an answer that is not JSON: {e}")))?;
    Ok((row.try_get("outcome")?, row.try_get("fence")?, answer))
}
