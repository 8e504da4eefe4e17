//! The upstream service under `uncertain: reconcile`: its `keyflight-effects` ledger for
//! the model's one scope, as far as reconciliation reads it (`docs/reconcile.md#the-rule`,
//! `effects/migrations/V3__keyflight_effects_reconcile.sql`).
//!
//! A run commits its effect at its fence unless the floor refuses it
//! (`keyflight_effect_row`'s `fenced`); the question (`keyflight_effect_reconcile`) answers
//! `committed` with a committed run's answer, or leaves a floor at the asked fence and
//! answers `absent`. A run that lost its caller may commit late, at any later step. The
//! ledger replays no earlier answer to a later run (V2's `earlier`): every commit is an
//! effect, so the floor alone keeps a second one out (`docs/model.md#the-service`).

use crate::{Mutation, Params};

/// What the ledger answers keyflight's question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Said {
    /// A run committed: execution `n`'s answer.
    Committed(u16),
    /// None did; runs at or below the asked fence are refused from now on.
    Absent,
}

/// The ledger, and the runs whose caller went away before they answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Service {
    /// `fenced_through`: runs at or below it are refused.
    pub floor: Option<u16>,
    /// Effects committed, in order: (fence, execution).
    pub committed: Vec<(u16, u16)>,
    /// Runs still in the service's hands, their caller gone: (execution, fence).
    pub orphans: Vec<(u16, u16)>,
}

impl Service {
    /// Run `n` at `fence` reaches its COMMIT: `true` when the effect is committed,
    /// `false` when the floor refuses it (`Error::Fenced`).
    pub fn commit(&mut self, n: u16, fence: u16, params: &Params) -> bool {
        let refused = self.floor.is_some_and(|floor| {
            if params.mutation == Some(Mutation::FloorAdmitsItsFence) {
                fence < floor
            } else {
                fence <= floor
            }
        });
        if !refused {
            self.committed.push((fence, n));
        }
        !refused
    }

    /// `keyflight_effect_reconcile(scope, fence)`, in one transaction.
    pub fn question(&mut self, fence: u16, params: &Params) -> Said {
        if let Some(&(_, n)) = self.committed.first() {
            return Said::Committed(n);
        }
        if params.mutation != Some(Mutation::AbsentWithoutFloor) {
            self.floor = Some(self.floor.map_or(fence, |f| f.max(fence)));
        }
        Said::Absent
    }
}
