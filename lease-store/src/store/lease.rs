//! L2: what the lease's owner does with it — renew, finalize, release.
//!
//! Every statement is fenced: it acts only `WHERE scope = $1 AND claim_id = $2
//! AND (state || '') = 'pending'` (the concatenation keeps the row's lookup on the
//! primary key: `docs/records.md#the-indexes`). A winner whose lease was stolen (or which already
//! settled the record) matches no row, and the call reports
//! [`StoreError::LeaseLost`] without touching the record — the new owner's
//! work is never overwritten.
//!
//! Settled rows keep their `claim_id` (the last claim that owned the record,
//! for operators); fencing still holds because every write here requires
//! `state = 'pending'`.
//!
//! Finalize and release are idempotent for their claim: repeating one after it
//! landed answers success, not `lease_lost`. The filter's record outbox
//! resends a call whose answer it never saw (a timeout, a reset, a stream that
//! ended with the call in flight); telling it "lost" would make it count a
//! record that is in fact safe. A repeat is recognised by a second, read-only
//! statement that runs only when the fenced write matched no row: the row
//! still carries this claim's id and the state the call leaves behind (for
//! `forget`, no row at all). It is a separate statement, not a subquery of the
//! write, so it sees a concurrent duplicate that committed while the write
//! waited for the row lock.
//!
//! A settle that names `previous_scope` (a dual claim, `dual/`) runs its statement on
//! both records in one transaction (in turn on a partitioned database), and lands when the
//! claim still held either.
//!
//! Leaving `pending` fires the `keyflight_settled` NOTIFY (a trigger, see
//! migrations V1 and V3) when a follower watches the record, which wakes
//! long-poll waiters on every replica (L4); an unwatched record settles
//! without a NOTIFY, whose database-wide lock would serialize the commit.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{
    FinalizeRequest, ReleaseAs, ReleaseRequest, RenewRequest, RenewResponse,
};
use std::time::SystemTime;

use futures_util::TryStreamExt;
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::{Row, Statement};
use uuid::Uuid;

use deadpool_postgres::Object;

use super::batch::FinalizeReply;
use super::dual::{settle_both, settle_in_turn};
use super::{Store, StoreError, duration_millis, millis_param};
pub use keyflight_store_core::sql::lease::FINALIZE_SQL;

pub(super) use keyflight_store_core::routed::FINALIZE;
pub(super) use keyflight_store_core::routed::OWNER;
pub(super) use keyflight_store_core::routed::RELEASE_COOLDOWN;
pub(super) use keyflight_store_core::routed::RELEASE_FORGET;
pub(super) use keyflight_store_core::routed::RELEASE_UNKNOWN;
pub(super) use keyflight_store_core::routed::RENEW;

/// What a release that landed left in the record, on the database's clock. A fault run's
/// judge times the record's freedom from these rather than from the evidence line, which a
/// store frozen between its commit and its log writes late (`chaos/README.md#known-gaps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Released {
    /// The call had landed before; this one only recognised it.
    pub repeat: bool,
    /// When the database applied it; unknown for the repeat of a forget (no row is left
    /// to read it from).
    pub at: Option<SystemTime>,
    /// When the `failed` record's cooldown ends (`lease_expires_at`): a release as cooldown.
    pub cooldown_ends_at: Option<SystemTime>,
}

impl Released {
    /// The stamps of a row returned by a release statement or [`OWNER_SQL`].
    fn stamped(row: &Row, repeat: bool) -> Result<Released, StoreError> {
        Ok(Released {
            repeat,
            at: row.try_get("updated_at")?,
            cooldown_ends_at: row.try_get("lease_expires_at")?,
        })
    }
}

/// The record a settle call leaves behind, for recognising its repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// Finalize: `completed`.
    Completed,
    /// Release as cooldown: `failed`.
    Failed,
    /// Release as unknown: `unknown`.
    Unknown,
    /// Release as forget: the row is gone.
    Gone,
}

impl Settled {
    fn of_release(release_as: ReleaseAs) -> Settled {
        match release_as {
            ReleaseAs::Cooldown => Settled::Failed,
            ReleaseAs::Unknown => Settled::Unknown,
            ReleaseAs::Forget => Settled::Gone,
        }
    }

    /// Whether the record as read now (`owner`: its claim id and state, `None`
    /// when there is no row) is what this claim's call would have left: then
    /// the call already landed and its repeat is a success.
    fn already_done(self, mine: Uuid, owner: Option<(Option<Uuid>, &str)>) -> bool {
        match (self, owner) {
            (Settled::Gone, None) => true,
            (Settled::Gone, Some(_)) | (_, None) => false,
            (settled, Some((claim_id, state))) => {
                claim_id == Some(mine)
                    && state
                        == match settled {
                            Settled::Completed => "completed",
                            Settled::Failed => "failed",
                            Settled::Unknown | Settled::Gone => "unknown",
                        }
            }
        }
    }

    /// [`Settled::already_done`] on the records a settle covers: any of them shows the
    /// outcome; a forget, all of them are gone.
    fn already_done_on(self, mine: Uuid, owners: &[Option<(Option<Uuid>, &str)>]) -> bool {
        let done = |owner: &Option<(Option<Uuid>, &str)>| self.already_done(mine, *owner);
        match self {
            Settled::Gone => owners.iter().all(done),
            _ => owners.iter().any(done),
        }
    }
}

impl Store {
    /// Extends the caller's lease to `lease_ms` from now (F4).
    pub async fn renew(
        &self,
        scope: &Digest,
        req: &RenewRequest,
    ) -> Result<RenewResponse, StoreError> {
        if req.lease_ms == 0 {
            return Err(StoreError::Invalid("lease_ms must be positive".into()));
        }
        let lease_ms = millis_param("lease_ms", req.lease_ms)?;
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&RENEW)).await?;
            let rest: [&(dyn ToSql + Sync); 2] = [&req.claim_id, &lease_ms];
            owned(
                self.write(
                    client,
                    &statement,
                    scope,
                    req.previous_scope,
                    (req.claim_id, &rest),
                )
                .await?
                .rows,
            )
        })
        .await?;
        Ok(RenewResponse {
            lease_ms: req.lease_ms,
        })
    }

    /// Records the upstream's response: the record becomes `completed` (F6, F7).
    ///
    /// With group commit on, the finalize first goes through a batch
    /// (`batch/finalizes.rs`); a call the batch did not land gets the single
    /// path's follow-up read (repeat or lost lease), or the single path itself.
    pub async fn finalize(&self, scope: &Digest, req: FinalizeRequest) -> Result<(), StoreError> {
        let claim_id = req.claim_id;
        let req = match &self.batch {
            // Two records settle in one transaction of their own (`dual/`).
            Some(queues) if req.previous_scope.is_none() => {
                match queues.finalize(*scope, req).await {
                    FinalizeReply::Answered(answer) => return answer,
                    FinalizeReply::NotOwned => {
                        return self
                            .run(async |client| {
                                let nothing = Written::default();
                                let owner = self.sql(&OWNER);
                                let done = Settled::Completed;
                                settled(client, owner, scope, None, claim_id, nothing, done).await
                            })
                            .await
                            .map(drop);
                    }
                    FinalizeReply::RunSingly(req) => req,
                }
            }
            _ => req,
        };
        self.finalize_single(scope, &req).await
    }

    /// The single path: [`FINALIZE_SQL`], then the owner read if it matched nothing.
    pub(super) async fn finalize_single(
        &self,
        scope: &Digest,
        req: &FinalizeRequest,
    ) -> Result<(), StoreError> {
        let body = &req.response.body;
        let status = i32::from(req.response.status);
        let headers = Json(&req.response.headers);
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(&FINALIZE)).await?;
            let rest: [&(dyn ToSql + Sync); 5] =
                [&req.claim_id, &status, &headers, body, &req.replayable];
            let written = self
                .write(
                    client,
                    &statement,
                    scope,
                    req.previous_scope,
                    (req.claim_id, &rest),
                )
                .await?;
            let done = Settled::Completed;
            settled(
                client,
                self.sql(&OWNER),
                scope,
                req.previous_scope,
                req.claim_id,
                written,
                done,
            )
            .await
        })
        .await
        .map(drop)
    }

    /// Gives the lease up without a recorded response (F6): `failed` with a
    /// cooldown, `unknown` for an operator, or the record forgotten.
    pub async fn release(
        &self,
        scope: &Digest,
        req: &ReleaseRequest,
    ) -> Result<Released, StoreError> {
        let cooldown_ms = match req.cooldown_ms {
            Some(ms) => millis_param("cooldown_ms", ms)?,
            None => duration_millis(self.default_cooldown),
        };
        self.run(async |client| {
            let with_cooldown: [&(dyn ToSql + Sync); 2] = [&req.claim_id, &cooldown_ms];
            let (sql, rest) = match req.release_as {
                ReleaseAs::Cooldown => (&RELEASE_COOLDOWN, &with_cooldown[..]),
                ReleaseAs::Unknown => (&RELEASE_UNKNOWN, &with_cooldown[..1]),
                ReleaseAs::Forget => (&RELEASE_FORGET, &with_cooldown[..1]),
            };
            let statement = client.prepare_cached(self.sql(sql)).await?;
            let written = self
                .write(
                    client,
                    &statement,
                    scope,
                    req.previous_scope,
                    (req.claim_id, rest),
                )
                .await?;
            let expected = Settled::of_release(req.release_as);
            let previous = req.previous_scope;
            let owner = self.sql(&OWNER);
            settled(
                client,
                owner,
                scope,
                previous,
                req.claim_id,
                written,
                expected,
            )
            .await
        })
        .await
    }
}

/// What a fenced write did: the rows it changed, and the first row it returned (a
/// release's stamps).
#[derive(Debug, Default)]
pub(super) struct Written {
    pub(super) rows: u64,
    pub(super) returned: Option<Row>,
}

impl Written {
    /// Both records of a dual settle: the rows changed on either, the stamps of `first`'s
    /// when it returned any.
    pub(super) fn and(self, other: Written) -> Written {
        Written {
            rows: self.rows + other.rows,
            returned: self.returned.or(other.returned),
        }
    }
}

/// Runs `statement` with `params`: the rows it changed and the first row it returned.
pub(super) async fn run_written(
    client: &Object,
    statement: &Statement,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Written, tokio_postgres::Error> {
    let stream = client.query_raw(statement, params.iter().copied()).await?;
    futures_util::pin_mut!(stream);
    let mut returned = None;
    while let Some(row) = stream.try_next().await? {
        returned.get_or_insert(row);
    }
    Ok(Written {
        rows: stream.rows_affected().unwrap_or(0),
        returned,
    })
}

impl Store {
    /// Runs a fenced write on `scope` (`$1`) with `rest` (`$2`…, the claim id `mine` first), and
    /// on the previous scope of a dual claim: in the same transaction on one database, in
    /// turn on a partitioned one (`dual/across_partitions.rs`).
    async fn write(
        &self,
        client: &Object,
        statement: &Statement,
        scope: &Digest,
        previous_scope: Option<Digest>,
        (mine, rest): (Uuid, &[&(dyn ToSql + Sync)]),
    ) -> Result<Written, StoreError> {
        match previous_scope {
            Some(previous) if previous != *scope && self.partitioned() => {
                let hold_ms = duration_millis(self.answer_timeout).saturating_mul(3);
                let both = (scope, &previous);
                settle_in_turn(client, statement, both, mine, rest, hold_ms).await
            }
            Some(previous) if previous != *scope => {
                settle_both(client, statement, scope, &previous, rest).await
            }
            _ => {
                let scope = scope.0.as_slice();
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&scope];
                params.extend_from_slice(rest);
                Ok(run_written(client, statement, &params).await?)
            }
        }
    }
}

/// The answer of a settle call that `written`: a changed row means it landed now;
/// none means it landed before (a repeat, success) or the lease is lost. A dual
/// settle lands when the claim holds either record (`dual/`), so its repeat is read on
/// both ([`Settled::already_done_on`]).
async fn settled(
    client: &Object,
    owner_sql: &str,
    scope: &Digest,
    previous_scope: Option<Digest>,
    mine: Uuid,
    written: Written,
    expected: Settled,
) -> Result<Released, StoreError> {
    if written.rows > 0 {
        // A release returns its stamps; a finalize returns none (on a partitioned
        // database, a row per record it changed).
        return match (&written.returned, expected) {
            (Some(row), Settled::Failed | Settled::Unknown | Settled::Gone) => {
                Released::stamped(row, false)
            }
            _ => Ok(Released::default()),
        };
    }
    let statement = client.prepare_cached(owner_sql).await?;
    let mut read = Vec::with_capacity(2);
    for scope in std::iter::once(*scope).chain(previous_scope.filter(|p| p != scope)) {
        read.push(client.query_opt(&statement, &[&scope.0.as_slice()]).await?);
    }
    let mut owners = Vec::with_capacity(read.len());
    for row in &read {
        owners.push(match row {
            Some(row) => Some((
                row.try_get::<_, Option<Uuid>>("claim_id")?,
                row.try_get::<_, &str>("state")?,
            )),
            None => None,
        });
    }
    if !expected.already_done_on(mine, &owners) {
        return Err(StoreError::LeaseLost);
    }
    // The stamps of the first record this claim's call left behind.
    let mut done = read
        .iter()
        .zip(&owners)
        .filter_map(|(row, owner)| row.as_ref().filter(|_| expected.already_done(mine, *owner)));
    match done.next() {
        Some(row) => Released::stamped(row, true),
        None => Ok(Released {
            repeat: true,
            ..Released::default()
        }),
    }
}

/// One row changed: the claim still owned the record. None: the lease is lost.
fn owned(rows: u64) -> Result<(), StoreError> {
    if rows == 0 {
        Err(StoreError::LeaseLost)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_recognised_only_by_its_own_claim_and_outcome() {
        let mine = Uuid::from_u128(1);
        let other = Uuid::from_u128(2);
        let done = |s: Settled, owner| s.already_done(mine, owner);
        assert!(done(Settled::Completed, Some((Some(mine), "completed"))));
        assert!(done(Settled::Failed, Some((Some(mine), "failed"))));
        assert!(done(Settled::Unknown, Some((Some(mine), "unknown"))));
        assert!(done(Settled::Gone, None));
        // Another claim owns it now: the lease was lost.
        assert!(!done(Settled::Completed, Some((Some(other), "completed"))));
        assert!(!done(Settled::Gone, Some((Some(other), "pending"))));
        // Ours, but settled differently (or still pending): not this call's repeat.
        assert!(!done(Settled::Completed, Some((Some(mine), "failed"))));
        assert!(!done(Settled::Failed, Some((Some(mine), "pending"))));
        // Deleted (cleanup): a finalize that finds nothing recorded nothing.
        assert!(!done(Settled::Completed, None));
    }

    #[test]
    fn a_dual_settles_repeat_shows_on_either_record_a_forgets_on_both() {
        let mine = Uuid::from_u128(1);
        let other = Uuid::from_u128(2);
        let completed = Some((Some(mine), "completed"));
        // A claim that held only the shared namespace's record (a namespace transition).
        assert!(Settled::Completed.already_done_on(mine, &[None, completed]));
        assert!(!Settled::Completed.already_done_on(mine, &[None, None]));
        assert!(Settled::Gone.already_done_on(mine, &[None, None]));
        let taken = Some((Some(other), "pending"));
        assert!(!Settled::Gone.already_done_on(mine, &[None, taken]));
    }
}
