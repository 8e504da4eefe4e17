//! What the ledger's calls answer, whichever driver made them: the SQL they run and the
//! decision each outcome stands for (`docs/effects.md#the-protocol`,
//! `docs/effects.md#reconciliation`).

use serde_json::Value;

/// The ledger's table and functions, as plain SQL (idempotent: run it at every start).
pub const MIGRATION: &str = concat!(
    include_str!("../migrations/V1__keyflight_effects.sql"),
    "\n",
    include_str!("../migrations/V2__keyflight_effects_fingerprint_and_begin.sql"),
    "\n",
    include_str!("../migrations/V3__keyflight_effects_reconcile.sql"),
);

/// The early check; its concurrency argument lives with the function, in [`MIGRATION`].
pub(crate) const BEGIN: &str =
    "SELECT outcome, fence, answer FROM keyflight_effect_begin($1, $2, $3)";

/// The record, last in the transaction.
pub(crate) const COMMIT: &str =
    "SELECT outcome, fence, answer FROM keyflight_effect_commit($1, $2, $3, $4)";

/// keyflight's question about an uncertain run, alone in its transaction.
pub(crate) const RECONCILE: &str =
    "SELECT outcome, fence, answer FROM keyflight_effect_reconcile($1, $2)";

/// What [`begin`](crate::begin) found, first in the handler's transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Begun {
    /// No run of the operation has committed. The transaction now holds the operation's row
    /// until it ends: any other run of it waits in its own `begin` until then. Do the work
    /// (calls outside the database included), then [`commit`](crate::commit).
    Run,
    /// An earlier run committed: answer with its `answer` at once, and drop the transaction
    /// (it holds nothing).
    Earlier {
        /// The fence of the run that committed.
        fence: i64,
        /// What it answered.
        answer: Value,
    },
}

/// How an operation's effect stands once [`commit`](crate::commit) returns.
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

/// What the ledger says about an operation keyflight holds `unknown`
/// ([`reconcile`](crate::reconcile())), once the question's transaction committed.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// A run of the operation committed its effect.
    Committed {
        /// The fence of the run that committed.
        fence: i64,
        /// What it answered.
        answer: Value,
    },
    /// No run committed, and none whose fence is the one asked about or lower ever will:
    /// the ledger now refuses them ([`Error::Fenced`]), so the operation may run again
    /// under a higher fence.
    Absent,
}

/// Why the ledger gave no answer to act on. This run's writes did not commit, except after
/// [`Error::Uncertain`]: the handler's transaction was rolled back (by the crate, by
/// Postgres, or when the caller drops it).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request with another fingerprint committed under this operation's scope: the key
    /// was reused for another request (after keyflight's record expired or was erased, so
    /// keyflight could not tell). Answer 409; nothing of this run committed.
    #[error(
        "effect ledger: another request (another fingerprint) already committed under this \
         idempotency scope, at fence {fence}"
    )]
    Conflict {
        /// The fence of the run that committed the other request.
        fence: i64,
    },
    /// keyflight asked the service about this operation and the ledger answered absent for
    /// a fence this run's is not above (`docs/effects.md#reconciliation`): the operation may
    /// already be running again under a higher fence, so this run is fenced out. Nothing of
    /// it committed; answer a 5xx or 409, never the run's answer.
    #[error(
        "effect ledger: this run was fenced out: keyflight reconciled the operation as not \
         committed through fence {through}"
    )]
    Fenced {
        /// The highest fence the ledger refuses for this operation.
        through: i64,
    },
    /// The COMMIT may have been sent and no answer came back (the connection dropped or
    /// failed around it): the transaction either committed whole (this run's writes and its
    /// answer) or not at all, and nothing here tells which. The ledger does: a retry of the operation gets this
    /// run's answer if it committed, and runs if it did not; so answer a status keyflight
    /// retries (5xx), never the answer.
    #[error("effect ledger: COMMIT sent, no answer: it may or may not have committed: {0}")]
    Uncertain(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Postgres refused or the connection failed before COMMIT was sent.
    #[error("effect ledger: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// sqlx refused or the connection failed before COMMIT was sent.
    #[cfg(feature = "sqlx")]
    #[error("effect ledger: {0}")]
    Sqlx(#[from] ::sqlx::Error),
    /// The function answered something else than one row with a known outcome (an older or
    /// edited function).
    #[error("effect ledger: the ledger's function answered {0}")]
    Unexpected(String),
}

/// What one of the two functions decided: `go` is the outcome that lets this run go on
/// (`run` for [`BEGIN`], `recorded` for [`COMMIT`]); `Some` carries an earlier run's fence
/// and answer.
pub(crate) fn decide(
    go: &str,
    outcome: &str,
    fence: i64,
    answer: Option<Value>,
) -> Result<Option<(i64, Value)>, Error> {
    match (outcome, answer) {
        (outcome, _) if outcome == go => Ok(None),
        ("earlier", Some(answer)) => Ok(Some((fence, answer))),
        ("conflict", _) => Err(Error::Conflict { fence }),
        ("fenced", _) => Err(Error::Fenced { through: fence }),
        (outcome, _) => Err(Error::Unexpected(format!("{outcome:?} to {go:?}"))),
    }
}

/// What [`RECONCILE`] decided.
pub(crate) fn reconciled(
    outcome: &str,
    fence: i64,
    answer: Option<Value>,
) -> Result<Reconciled, Error> {
    match (outcome, answer) {
        ("committed", Some(answer)) => Ok(Reconciled::Committed { fence, answer }),
        ("absent", None) => Ok(Reconciled::Absent),
        (outcome, _) => Err(Error::Unexpected(format!("{outcome:?} to a reconcile"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_outcome_is_one_decision() {
        assert!(matches!(decide("run", "run", 3, None), Ok(None)));
        assert!(matches!(
            decide("recorded", "earlier", 3, Some(json!(1))),
            Ok(Some((3, _)))
        ));
        assert!(matches!(
            decide("run", "conflict", 3, None),
            Err(Error::Conflict { fence: 3 })
        ));
        assert!(matches!(
            decide("recorded", "fenced", 3, None),
            Err(Error::Fenced { through: 3 })
        ));
        for (go, outcome) in [("run", "recorded"), ("recorded", "run"), ("run", "earlier")] {
            assert!(
                matches!(decide(go, outcome, 3, None), Err(Error::Unexpected(_))),
                "{outcome} to {go}"
            );
        }
    }

    #[test]
    fn a_reconcile_is_committed_with_an_answer_or_absent_without() {
        assert_eq!(
            reconciled("committed", 3, Some(json!(1))).ok(),
            Some(Reconciled::Committed {
                fence: 3,
                answer: json!(1)
            })
        );
        assert_eq!(reconciled("absent", 3, None).ok(), Some(Reconciled::Absent));
        for (outcome, answer) in [
            ("committed", None),
            ("absent", Some(json!(1))),
            ("run", None),
        ] {
            assert!(
                matches!(reconciled(outcome, 3, answer), Err(Error::Unexpected(_))),
                "{outcome}"
            );
        }
    }
}
