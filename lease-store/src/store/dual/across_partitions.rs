//! Claims across a recipe change on a partitioned database, whose two scopes may live on
//! two partitions that no transaction spans (`docs/distributed-sql.md#claims-across-a-recipe-change`).
//!
//! One database wins both records in one transaction, or neither. Across partitions the
//! claim takes them in turn, in the byte order of their scopes as one database locks them:
//! the first, then the second under the same `claim_id`. A claim that wins the first and
//! loses the second gives the first back (the orphan release, `store/orphan.rs`) before it
//! answers, and answers from both records as one database would. So a caller is only ever
//! told it won when it holds both; for a moment a record may be held by a claim that then
//! gives it back, and whoever met it then follows it and is woken by the release, as after
//! a `forget`.
//!
//! Two claims that share a scope exclude each other as on one database: each needs every
//! record it names, and a record is held by one claim at a time. Dual claimers of one
//! request meet on the first scope; a proxy still on one recipe meets a dual claimer on
//! that recipe's scope.
//!
//! The settles of such a claim run on both records in turn as well, after a check that
//! stands in for one database's `NONE_TAKEN_SQL` ([`settle_in_turn`]).

use std::time::Instant;

use deadpool_postgres::Object;
use keyflight_protocol::Digest;
use keyflight_protocol::wire::PreviousIdentity;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};
use uuid::Uuid;

use super::super::claim::{CLAIM, ClaimParams, MAX_ATTEMPTS, READ, held, won_attempt, won_how};
use super::super::lease::{OWNER, Written, run_written};
use super::super::orphan::{self, OrphanRelease};
use super::super::{ClaimAttempt, Store, StoreError};
use super::{Identities, answer_from_records, come_back_shortly};

pub(in crate::store) use keyflight_store_core::routed::HOLD_FOR_SETTLE;

impl Store {
    /// A dual claim on a partitioned database: both records in turn, or neither.
    pub(super) async fn claim_in_turn(
        &self,
        scope: &Digest,
        params: &ClaimParams,
        previous: &PreviousIdentity,
    ) -> Result<ClaimAttempt, StoreError> {
        let Identities {
            current,
            older,
            in_byte_order: [first, second],
        } = Identities::of(scope, params, previous);
        let held_until = self.takeovers_held_until();
        let may_take_over = held_until.is_none();
        self.run(async |client| {
            let claim = client.prepare_cached(CLAIM.call()).await?;
            let read = client.prepare_cached(READ.call()).await?;
            for _ in 0..MAX_ATTEMPTS {
                let claim_id = Uuid::now_v7();
                let sent = Instant::now();
                let claim_one = async |(scope, fingerprint): (Digest, Digest)| {
                    let (scope_param, fingerprint_param) =
                        (scope.0.as_slice(), fingerprint.0.as_slice());
                    let params: [&(dyn ToSql + Sync); 8] = [
                        &scope_param,
                        &fingerprint_param,
                        &claim_id,
                        &params.lease_ms_sql,
                        &params.retention_ms,
                        &may_take_over,
                        &params.at_most_once,
                        &params.workload.as_deref(),
                    ];
                    let row = client.query_opt(&claim, &params).await?;
                    self.won(&scope, row)
                };
                let mut first_guard = super::OrphanGuard::new(self, first.0, claim_id);
                if let Some(first_row) = claim_one(first).await? {
                    let first_how = won_how(&first_row)?;
                    first_guard.won(first_how);
                    let second_guard = super::OrphanGuard::new(self, second.0, claim_id);
                    let second_row = claim_one(second).await?;
                    second_guard.delivered();
                    if let Some(second_row) = second_row {
                        first_guard.delivered();
                        let row = if first.0 == *scope {
                            &first_row
                        } else {
                            &second_row
                        };
                        return won_attempt(row, claim_id, params.lease_ms, sent);
                    }
                    // Won the first alone: given back before anyone is told of it (if
                    // this fails, the guard releases it in the background), as an orphan
                    // is (`store/orphan.rs`).
                    let release = OrphanRelease::after(first_how);
                    let statement = client
                        .prepare_cached(orphan::statement(release).call())
                        .await?;
                    client
                        .query_opt(&statement, &[&first.0.0.as_slice(), &claim_id])
                        .await?;
                }
                first_guard.delivered();
                if let Some(attempt) =
                    answer_from_records(client, &read, current, older, held_until).await?
                {
                    return Ok(attempt);
                }
            }
            Ok(come_back_shortly())
        })
        .await
    }

    /// The row of a claim statement that won `scope`; `None` when it lost, or held a lapsed
    /// at-most-once lease instead (committed, as the statement runs alone: counted here).
    fn won(&self, scope: &Digest, row: Option<Row>) -> Result<Option<Row>, StoreError> {
        match row {
            Some(row) if held(&row)? => {
                self.lapses_held.inc();
                crate::evidence::lapse_held(scope, row.try_get("fence")?);
                Ok(None)
            }
            row => Ok(row),
        }
    }
}

/// A fenced settle `statement` (`$1` scope, then `params`, the claim id `mine` first) on
/// `scope` and on `previous`, on a partitioned database: the rows it changed on both.
///
/// One database runs both in one transaction that rolls back when another claim holds
/// either record (`NONE_TAKEN_SQL`). Here: first each record this claim holds is kept
/// held for `hold_ms` more ([`HOLD_FOR_SETTLE_SQL`], the store's answer bound thrice); a
/// record it does not hold is read, and another claim's makes the settle land nowhere
/// (the caller then reads the owners: a lost lease). Only then does the statement run on
/// both, so no claim can take either record over between the check and the settle, unless
/// a statement stalls past its bound.
pub(in crate::store) async fn settle_in_turn(
    client: &Object,
    statement: &Statement,
    (scope, previous): (&Digest, &Digest),
    mine: Uuid,
    params: &[&(dyn ToSql + Sync)],
    hold_ms: i64,
) -> Result<Written, StoreError> {
    let hold = client.prepare_cached(HOLD_FOR_SETTLE.call()).await?;
    let owner = client.prepare_cached(OWNER.call()).await?;
    let keep = async |scope: &Digest| {
        let scope_param = scope.0.as_slice();
        run_written(client, &hold, &[&scope_param, &mine, &hold_ms]).await
    };
    let (scope_kept, previous_kept) = futures_util::try_join!(keep(scope), keep(previous))?;
    for (scope, kept) in [(scope, scope_kept), (previous, previous_kept)] {
        if kept.rows > 0 {
            continue;
        }
        let taken = match client.query_opt(&owner, &[&scope.0.as_slice()]).await? {
            Some(row) => row.try_get::<_, Option<Uuid>>("claim_id")? != Some(mine),
            None => false,
        };
        if taken {
            return Ok(Written::default());
        }
    }
    let on = async |scope: &Digest| {
        let scope_param = scope.0.as_slice();
        let mut all: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(params.len() + 1);
        all.push(&scope_param);
        all.extend_from_slice(params);
        run_written(client, statement, &all).await
    };
    let (on_scope, on_previous) = futures_util::try_join!(on(scope), on(previous))?;
    // The stamps of the record the claim was made under, when it changed.
    Ok(on_scope.and(on_previous))
}
