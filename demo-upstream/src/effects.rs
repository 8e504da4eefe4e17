//! The opt-in effect ledger (`--effects-database-url`): a payment's effect is a row in
//! Postgres, committed in one transaction with the `keyflight-effects` record of the
//! operation it belongs to (`docs/effects.md`).
//!
//! Without it a payment's effect is the execution count alone, and a re-run (the proxy died
//! after the upstream answered, an uncertain outcome under `uncertain: retry`) pays again.
//! With it a re-run still executes (it is counted and logged: the filter forwarded it), but
//! the early check answers it with the first run's answer before its call to the payment
//! provider (the `hold` and `delay_ms` it was asked for), so `GET /effects` counts each
//! operation's payment once; and a key reused for another body gets 409, not the first
//! body's answer.
//!
//! It also answers keyflight's reconcile question ([`Ledger::reconcile_endpoint`]): the
//! answers it records (`{"status", "body"}`) are what the endpoint's default renderer reads,
//! so a reconciled run is replayed with its status and JSON body. A run fenced out by that
//! question answers 503 and pays nothing.

use std::future::Future;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use keyflight_effects::reconcile::Endpoint;
use keyflight_effects::{Begun, Committed, Operation, Reconciled};
use serde_json::{Value, json};
use tokio_postgres::NoTls;
use uuid::Uuid;

use crate::reconciliations::{Outcome, ReconcileLog, Reconciliation};

/// The service's own table: one row per payment made.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS demo_payments (
    payment_id uuid PRIMARY KEY,
    scope      text,
    fence      bigint,
    created_at timestamptz NOT NULL DEFAULT now()
)";

const INSERT_PAYMENT: &str =
    "INSERT INTO demo_payments (payment_id, scope, fence) VALUES ($1, $2, $3)";

/// Every payment made under an operation keyflight forwarded, oldest first.
const PAYMENT_ROWS: &str = "SELECT scope, fence FROM demo_payments
    WHERE scope IS NOT NULL AND fence IS NOT NULL ORDER BY created_at, payment_id";

const COUNT_PAYMENTS: &str = "SELECT
    (SELECT count(*) FROM demo_payments),
    (SELECT count(*) FROM (SELECT FROM demo_payments WHERE scope IS NOT NULL
                           GROUP BY scope HAVING count(*) > 1) AS twice)";

/// The payments database.
#[derive(Clone)]
pub struct Ledger {
    pool: Pool,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

/// What a payment's transaction did.
#[derive(Debug)]
pub enum Paid {
    /// Its row committed (with the operation's record, when it has one).
    Now,
    /// An earlier run of its operation committed: answer with that run's status and body.
    Earlier {
        /// The earlier run's status.
        status: u16,
        /// The earlier run's JSON answer.
        body: Value,
    },
}

/// Why the payments database failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// A connection or a statement failed.
    #[error("payments database: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// No connection could be had.
    #[error("payments database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The pool could not be built.
    #[error("payments database pool: {0}")]
    Build(#[from] deadpool_postgres::BuildError),
    /// The operation's record failed.
    #[error(transparent)]
    Record(#[from] keyflight_effects::Error),
    /// The recorded answer is not one this service writes.
    #[error("payments database: a recorded answer without status and body")]
    Malformed,
}

impl Ledger {
    /// Connects to `url` and creates the payments table and the effect ledger.
    pub async fn open(url: &str) -> Result<Ledger, LedgerError> {
        let config = url.parse::<tokio_postgres::Config>()?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // A payment holds its connection across its provider call (`hold`, `delay_ms`): room
        // for as many in flight as a chaos run starts, well under the test cluster's limit.
        let pool = Pool::builder(manager)
            .max_size(64)
            .runtime(Runtime::Tokio1)
            .build()?;
        let client = pool.get().await?;
        client.batch_execute(SCHEMA).await?;
        keyflight_effects::install(&**client).await?;
        Ok(Ledger { pool })
    }

    /// Makes payment `payment_id` (this run's answer: `status` and `body`) as one
    /// transaction, recorded under `operation` and its request's fingerprint when keyflight
    /// forwarded one. `provider` is the call to the payment provider: made only when no
    /// earlier run of the operation committed, while this run holds the operation.
    pub async fn pay(
        &self,
        payment_id: Uuid,
        operation: Option<(&Operation, &str)>,
        provider: impl Future<Output = ()>,
        (status, body): (u16, &Value),
    ) -> Result<Paid, LedgerError> {
        let mut client = self.pool.get().await?;
        // The driver's own transaction (the pool wraps it in another type).
        let tx = tokio_postgres::Client::transaction(&mut client).await?;
        if let Some((operation, fingerprint)) = operation
            && let Begun::Earlier { answer, .. } =
                keyflight_effects::begin(&tx, operation, fingerprint).await?
        {
            return earlier(&answer);
        }
        provider.await;
        tx.execute(
            INSERT_PAYMENT,
            &[
                &payment_id,
                &operation.map(|(o, _)| o.scope()),
                &operation.map(|(o, _)| o.fence()),
            ],
        )
        .await?;
        let Some((operation, fingerprint)) = operation else {
            tx.commit().await?;
            return Ok(Paid::Now);
        };
        let answer = json!({"status": status, "body": body});
        match keyflight_effects::commit(tx, operation, fingerprint, &answer).await? {
            Committed::Now => Ok(Paid::Now),
            Committed::Earlier { answer, .. } => earlier(&answer),
        }
    }

    /// keyflight's reconcile question, answered from this ledger on a connection of the pool
    /// (requiring `token` as a bearer token when given); each answer is logged in `log`.
    pub fn reconcile_endpoint(&self, token: Option<String>, log: Arc<ReconcileLog>) -> Endpoint {
        let pool = self.pool.clone();
        let endpoint = Endpoint::new(move |operation: Operation| {
            let (pool, log) = (pool.clone(), log.clone());
            async move {
                let answer = reconcile(&pool, &operation).await;
                match &answer {
                    Ok(reconciled) => {
                        tracing::info!(
                            scope = operation.scope(),
                            fence = operation.fence(),
                            committed = matches!(reconciled, Reconciled::Committed { .. }),
                            "reconcile answered"
                        );
                        let (outcome, fence) = match reconciled {
                            Reconciled::Committed { fence, .. } => {
                                (Outcome::Committed, Some(*fence))
                            }
                            Reconciled::Absent => (Outcome::Absent, None),
                        };
                        log.push(Reconciliation::now(
                            operation.scope(),
                            operation.fence(),
                            outcome,
                            fence,
                        ));
                    }
                    // The endpoint answers 503 without these words.
                    Err(e) => tracing::warn!(error = %e, "reconcile failed"),
                }
                answer
            }
        });
        match token {
            Some(token) => endpoint.token(token),
            None => endpoint,
        }
    }

    /// Each payment made under an operation: its scope and the fence of the run that made it.
    pub async fn payment_rows(&self) -> Result<Vec<(String, i64)>, LedgerError> {
        let client = self.pool.get().await?;
        client
            .query(PAYMENT_ROWS, &[])
            .await?
            .iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }

    /// How many payments committed, and how many operations (scopes) paid more than once:
    /// the re-run effects the ledger exists to prevent, counted from the service's own rows.
    pub async fn payments(&self) -> Result<(i64, i64), LedgerError> {
        let client = self.pool.get().await?;
        let row = client.query_one(COUNT_PAYMENTS, &[]).await?;
        Ok((row.try_get(0)?, row.try_get(1)?))
    }
}

/// What the ledger says about `operation`, on a connection of `pool`.
async fn reconcile(pool: &Pool, operation: &Operation) -> Result<Reconciled, LedgerError> {
    let mut client = pool.get().await?;
    Ok(keyflight_effects::reconcile(&mut client, operation).await?)
}

/// An earlier run's recorded answer, as this service writes it.
fn earlier(answer: &Value) -> Result<Paid, LedgerError> {
    let status = answer["status"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok());
    match (status, answer.get("body")) {
        (Some(status), Some(body)) => Ok(Paid::Earlier {
            status,
            body: body.clone(),
        }),
        _ => Err(LedgerError::Malformed),
    }
}
