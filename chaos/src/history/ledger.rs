//! The upstream's own evidence (`--upstream-effects`): its payments ledger and the answers
//! it gave keyflight's reconcile question, read after the run — which run of an operation
//! committed, independent of anything keyflight logged.

use serde::{Deserialize, Serialize};

use super::Ms;

/// What the upstream's payments database and reconcile endpoint say
/// (`GET /effects/ledger`, `demo-upstream/src/reconciliations.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Every payment made under an operation.
    pub payments: Vec<Payment>,
    /// Every reconcile answer the service gave, in order.
    pub reconciliations: Vec<Reconciliation>,
}

impl Ledger {
    /// Whether the run of `scope` under `fence` made a payment that committed.
    pub fn paid(&self, scope: &str, fence: u64) -> bool {
        self.payments
            .iter()
            .any(|payment| payment.scope == scope && payment.fence == fence)
    }

    /// The first `absent` answer about `scope` at fence `fence` or higher: the service's
    /// word that no run at `fence` or below ever commits.
    pub fn fenced_out(&self, scope: &str, fence: u64) -> Option<&Reconciliation> {
        self.reconciliations
            .iter()
            .find(|answer| answer.scope == scope && answer.absent && answer.asked_fence >= fence)
    }
}

/// One payment row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// The operation.
    pub scope: String,
    /// The fence of the run that made it.
    pub fence: u64,
}

/// One answer the service gave keyflight's reconcile question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// When its transaction had committed, on the run's clock.
    pub at_ms: Ms,
    /// The operation asked about.
    pub scope: String,
    /// The fence asked about.
    pub asked_fence: u64,
    /// `absent` (the fence and every lower one fenced out); `committed` otherwise.
    pub absent: bool,
}
