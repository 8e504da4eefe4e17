//! The database: one `keyflight_records` row (the model has one key) whose every
//! transition mirrors one statement of the lease-store, predicate by predicate
//! (`docs/model.md#what-each-action-stands-for`). Times are milliseconds of the
//! model's clock, which plays `clock_timestamp()` (and `now()`: a statement is
//! one atomic step here).
//!
//! The statements are the store's own (`keyflight_store_core::sql`), pinned by value
//! (`tests/sql_pinned.rs`): a statement that changes without this mirror fails that test.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::WonHow;
use keyflight_store_core::answer::{Answer, Record, RecordState, answer_for};

use crate::ghost::{Displaced, Ghost};
use crate::{Mutation, Params};

/// The `state` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowState {
    /// A claim owns the record.
    Pending,
    /// The answer is recorded.
    Completed,
    /// A cooldown runs.
    Failed,
    /// Waits for an operator.
    Unknown,
}

impl RowState {
    /// The column as the store reads it.
    fn column(self) -> RecordState {
        match self {
            RowState::Pending => RecordState::Pending,
            RowState::Completed => RecordState::Completed,
            RowState::Failed => RecordState::Failed,
            RowState::Unknown => RecordState::Unknown,
        }
    }
}

/// A recorded response (`response_status`, `response_headers`, `response_body`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Recorded {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

/// The one row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    /// `state`.
    pub state: RowState,
    /// `fingerprint`.
    pub fingerprint: Digest,
    /// `claim_id` (the model's claim ids are small numbers).
    pub claim_id: u16,
    /// `fence`.
    pub fence: u16,
    /// `lease_expires_at` (NULL: `None`).
    pub lease_expires_at: Option<u64>,
    /// `expires_at` (`created_at + retention`).
    pub expires_at: u64,
    /// The response, `None` while there is none.
    pub response: Option<Recorded>,
    /// `replayable`.
    pub replayable: bool,
    /// `at_most_once`.
    pub at_most_once: bool,
}

/// How a claim won (`ins`, `ttl`, `steal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum How {
    /// `ins`: `claimed`.
    Claimed,
    /// `ttl`: `recovered_ttl`.
    RecoveredTtl,
    /// `steal`: `recovered_abandoned`.
    RecoveredAbandoned,
}

impl How {
    /// The wire's name for it.
    pub fn wire(self) -> WonHow {
        match self {
            How::Claimed => WonHow::Claimed,
            How::RecoveredTtl => WonHow::RecoveredTtl,
            How::RecoveredAbandoned => WonHow::RecoveredAbandoned,
        }
    }
}

/// What a settle call writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Settle {
    /// `FINALIZE_SQL`.
    Finalize {
        /// The response.
        response: Recorded,
        /// `replayable`.
        replayable: bool,
    },
    /// `RELEASE_COOLDOWN_SQL`.
    Cooldown {
        /// Cooldown ms.
        cooldown_ms: u64,
    },
    /// `RELEASE_UNKNOWN_SQL`.
    Unknown,
    /// `RELEASE_FORGET_SQL`.
    Forget,
}

/// What a lost claim is told (`keyflight_store_core::answer::answer_for`, and the grace's
/// `in_progress`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// `completed` with its response (`None`: not replayable) and retention left.
    Completed(Option<Recorded>, u64),
    /// Another fingerprint.
    Conflict,
    /// Running, or held by the grace, or the claim loop ran out.
    InProgress(u64),
    /// `failed`, cooldown left.
    Cooldown(u64),
    /// `unknown`, with the fence of the run whose outcome is uncertain.
    Unknown(u16),
}

/// The database.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Db {
    /// Postgres answers (a restart is `false` until it is back).
    pub up: bool,
    /// The row, if any.
    pub row: Option<Row>,
    /// `keyflight_fence_seq`.
    pub fence_seq: u16,
}

/// A claim's bound parameters (`$2`, `$4`…`$7` of `CLAIM_SQL`; `$3`, the claim id, is
/// the fence the claim wins: unique per won claim, as a UUIDv7 is; `$8`, the workload a new
/// row is counted to, is not modelled: no statement's decision reads it).
#[derive(Debug, Clone, Copy)]
pub struct ClaimArgs {
    /// `$2`.
    pub fingerprint: Digest,
    /// `$4`.
    pub lease_ms: u64,
    /// `$5`.
    pub retention_ms: u64,
    /// `$6`: no takeover grace holds on the serving replica.
    pub may_take_over: bool,
    /// `$7`: the claim's policy holds uncertain outcomes.
    pub at_most_once: bool,
}

impl Db {
    /// `Store::claim_single`: `CLAIM_SQL`, and when it lost, `READ_SQL` and
    /// `answer_for` (the retry loop re-runs a statement that would match the same
    /// nothing, so its end, `in_progress`, is taken at once).
    pub fn claim(
        &mut self,
        now: u64,
        args: ClaimArgs,
        params: &Params,
        ghost: &mut Ghost,
        op: u8,
    ) -> Result<(How, u16), Lost> {
        let was_pending = self.row.as_ref().map(|r| r.state) == Some(RowState::Pending);
        if let Some(won) = self.claim_sql(now, args, params) {
            let (how, fence) = won.0;
            ghost.claimed(
                fence,
                op,
                how,
                now,
                won.1,
                (args.fingerprint, args.at_most_once),
            );
            return Ok((how, fence));
        }
        let Some(row) = &self.row else {
            return Err(Lost::InProgress(1));
        };
        if was_pending && row.state == RowState::Unknown {
            // `held`: a lapsed at-most-once lease became `unknown`.
            ghost.unknown.push((row.fingerprint, row.fence, now));
        }
        // `READ_SQL`'s columns, as the row reads at `now`.
        let record = Record {
            state: row.state.column(),
            same_fingerprint: row.fingerprint == args.fingerprint,
            remaining_ms: row.lease_expires_at.map_or(0, |at| at.saturating_sub(now)),
            retention_over: row.expires_at < now,
        };
        Err(match answer_for(&record) {
            None => Lost::InProgress(1),
            Some(Answer::Completed) => Lost::Completed(
                row.replayable.then(|| row.response.clone()).flatten(),
                row.expires_at.saturating_sub(now),
            ),
            Some(Answer::Conflict) => Lost::Conflict,
            Some(Answer::InProgress { retry_after_s }) => Lost::InProgress(retry_after_s),
            Some(Answer::Cooldown { retry_after_s }) => Lost::Cooldown(retry_after_s),
            Some(Answer::Unknown) => Lost::Unknown(row.fence),
        })
    }

    /// `CLAIM_SQL`: `ins`, else `ttl`, else `steal`, else `held` (which wins nothing:
    /// the row becomes `unknown`). Returns how it won and the fence, with the row it
    /// displaced (evidence for the judge's rules).
    fn claim_sql(
        &mut self,
        now: u64,
        a: ClaimArgs,
        params: &Params,
    ) -> Option<((How, u16), Option<Displaced>)> {
        let reopened = |fence: u16| Row {
            state: RowState::Pending,
            fingerprint: a.fingerprint,
            claim_id: fence,
            fence,
            lease_expires_at: Some(now + a.lease_ms),
            expires_at: now + a.retention_ms,
            response: None,
            replayable: true,
            at_most_once: a.at_most_once,
        };
        let may_take_over =
            a.may_take_over || params.mutation == Some(Mutation::TakeoverIgnoresGrace);
        let Some(r) = &self.row else {
            // ins: INSERT … ON CONFLICT (scope) DO NOTHING
            let fence = self.next_fence();
            self.row = Some(reopened(fence));
            return Some(((How::Claimed, fence), None));
        };
        let expired = |at: Option<u64>| at.is_some_and(|at| at < now);
        // ttl: expires_at < now AND (completed/failed OR pending, lease ran out, $6)
        let ttl = r.expires_at < now
            && (matches!(r.state, RowState::Completed | RowState::Failed)
                || (r.state == RowState::Pending && expired(r.lease_expires_at) && may_take_over));
        // steal: expires_at >= now AND (failed OR pending AND $6 AND NOT at_most_once
        //        AND NOT $7) AND lease ran out AND same fingerprint
        let claim_at_most_once =
            a.at_most_once && params.mutation != Some(Mutation::HoldIgnoresTheRetrysFlag);
        let same_fingerprint = r.fingerprint == a.fingerprint
            || params.mutation == Some(Mutation::StealIgnoresFingerprint);
        let steal = !ttl
            && r.expires_at >= now
            && (r.state == RowState::Failed
                || (r.state == RowState::Pending
                    && may_take_over
                    && ((!r.at_most_once && !claim_at_most_once)
                        || params.mutation == Some(Mutation::StealIgnoresHold))))
            && expired(r.lease_expires_at)
            && same_fingerprint;
        // held (held_lapse!): pending AND (at_most_once OR $7 AND same fingerprint) AND $6
        //        AND lease ran out AND expires_at >= now, and not ins or ttl: the row
        //        becomes `unknown`.
        let held = !ttl
            && r.state == RowState::Pending
            && (r.at_most_once || (claim_at_most_once && r.fingerprint == a.fingerprint))
            && may_take_over
            && expired(r.lease_expires_at)
            && r.expires_at >= now;
        let how = if ttl {
            How::RecoveredTtl
        } else if steal {
            How::RecoveredAbandoned
        } else {
            if held && let Some(r) = self.row.as_mut() {
                r.state = RowState::Unknown;
                r.lease_expires_at = None;
            }
            return None;
        };
        let displaced = Displaced::of(r, now);
        let fence = self.next_fence();
        self.row = Some(reopened(fence));
        Some(((how, fence), Some(displaced)))
    }

    fn next_fence(&mut self) -> u16 {
        self.fence_seq += 1;
        self.fence_seq
    }

    /// `RENEW_SQL`: `WHERE claim_id = $2 AND state = 'pending'`; no row is `lease_lost`.
    pub fn renew(&mut self, now: u64, claim_id: u16, lease_ms: u64) -> bool {
        match &mut self.row {
            Some(r) if r.claim_id == claim_id && r.state == RowState::Pending => {
                r.lease_expires_at = Some(now + lease_ms);
                true
            }
            _ => false,
        }
    }

    /// `FINALIZE_SQL` / `RELEASE_*_SQL`, then `OWNER_SQL` when the fenced write
    /// matched nothing (`lease.rs`'s `settled`): `true` is a 200, `false` is 409
    /// `lease_lost`.
    pub fn settle(
        &mut self,
        now: u64,
        claim_id: u16,
        settle: &Settle,
        params: &Params,
        ghost: &mut Ghost,
    ) -> bool {
        let fenced = |r: &Row| {
            r.state == RowState::Pending
                && (r.claim_id == claim_id
                    || (params.mutation == Some(Mutation::FinalizeUnfenced)
                        && matches!(settle, Settle::Finalize { .. })))
        };
        if let Some(r) = self.row.as_mut().filter(|r| fenced(r)) {
            ghost.settle_landed(claim_id, r, now);
            match settle {
                Settle::Finalize {
                    response,
                    replayable,
                } => {
                    r.state = RowState::Completed;
                    r.lease_expires_at = None;
                    r.response = Some(response.clone());
                    r.replayable = *replayable;
                }
                Settle::Cooldown { cooldown_ms } => {
                    r.state = RowState::Failed;
                    r.lease_expires_at = Some(now + cooldown_ms);
                }
                Settle::Unknown => {
                    ghost.unknown.push((r.fingerprint, r.fence, now));
                    r.state = RowState::Unknown;
                    r.lease_expires_at = None;
                }
                Settle::Forget => {
                    ghost.deleted(Displaced::of(r, now));
                    self.row = None;
                }
            }
            return true;
        }
        // OWNER_SQL and `Settled::already_done`.
        match (&self.row, settle) {
            (None, Settle::Forget) => true,
            (Some(_), Settle::Forget) | (None, _) => false,
            (Some(r), settle) => {
                r.claim_id == claim_id
                    && r.state
                        == match settle {
                            Settle::Finalize { .. } => RowState::Completed,
                            Settle::Cooldown { .. } => RowState::Failed,
                            Settle::Unknown | Settle::Forget => RowState::Unknown,
                        }
            }
        }
    }

    /// `RECONCILED_COMMITTED_SQL` (`answer` given) or `RECONCILED_ABSENT_SQL`: only while
    /// the record is `unknown` at `fence` with `fingerprint`. `Err(true)`: another state
    /// (`409 not_unknown`); `Err(false)`: no record (404). The absent cooldown ends at
    /// `clock_timestamp()`, which the claim that follows reads strictly later: a
    /// millisecond earlier on the model's clock, whose steps within a tick share one time.
    pub fn reconciled(
        &mut self,
        now: u64,
        (fence, fingerprint): (u16, Digest),
        answer: Option<Recorded>,
        ghost: &mut Ghost,
    ) -> Result<(), bool> {
        let Some(r) = self.row.as_mut() else {
            return Err(false);
        };
        if !(r.state == RowState::Unknown && r.fence == fence && r.fingerprint == fingerprint) {
            return Err(true);
        }
        ghost.reconciled.push((fence, answer.is_some(), now));
        match answer {
            Some(response) => {
                r.state = RowState::Completed;
                r.lease_expires_at = None;
                r.response = Some(response);
                r.replayable = true;
            }
            None => {
                r.state = RowState::Failed;
                r.lease_expires_at = Some(now.saturating_sub(1));
                r.response = None;
            }
        }
        Ok(())
    }

    /// `GIVE_BACK_SQL`: an orphan takeover's record left `failed`, its cooldown over now.
    pub fn give_back(&mut self, now: u64, claim_id: u16, ghost: &mut Ghost) {
        if let Some(r) = self
            .row
            .as_mut()
            .filter(|r| r.claim_id == claim_id && r.state == RowState::Pending)
        {
            ghost.given_back.push(r.fence);
            r.state = RowState::Failed;
            r.lease_expires_at = Some(now);
        }
    }

    /// `RELEASE_ORPHAN_SQL`: the `forget` release's fenced `DELETE`.
    pub fn release_orphan(&mut self, now: u64, claim_id: u16, ghost: &mut Ghost) {
        if let Some(r) = self
            .row
            .as_ref()
            .filter(|r| r.claim_id == claim_id && r.state == RowState::Pending)
        {
            ghost.deleted(Displaced::of(r, now));
            self.row = None;
        }
    }

    /// Whether `DELETE_EXPIRED_SQL` would delete the row now (`$3`: pending rows may go,
    /// false in the takeover grace).
    pub fn expired(&self, now: u64, pending_may_go: bool, params: &Params) -> bool {
        let Some(r) = &self.row else { return false };
        let pending_ok = if params.mutation == Some(Mutation::CleanupDeletesLivePending) {
            true
        } else {
            pending_may_go
                && r.lease_expires_at
                    .is_some_and(|at| at + params.settle_horizon_ms < now)
        };
        r.expires_at < now
            && matches!(
                r.state,
                RowState::Completed | RowState::Failed | RowState::Pending
            )
            && (r.state != RowState::Pending || pending_ok)
    }

    /// Whether `HOLD_ABANDONED_SQL` would hold the row now (`$3`: false in the takeover
    /// grace): `pending`, at-most-once, its lease over for more than the settle horizon,
    /// within its retention.
    pub fn abandoned_lapse(&self, now: u64, may_hold: bool, params: &Params) -> bool {
        self.row.as_ref().is_some_and(|r| {
            r.state == RowState::Pending
                && r.at_most_once
                && may_hold
                && r.lease_expires_at
                    .is_some_and(|at| at + params.settle_horizon_ms < now)
                && r.expires_at >= now
        })
    }

    /// A cleanup pass: `HOLD_ABANDONED_SQL`, then `DELETE_EXPIRED_SQL`.
    pub fn cleanup(&mut self, now: u64, pending_may_go: bool, params: &Params, ghost: &mut Ghost) {
        if self.abandoned_lapse(now, pending_may_go, params)
            && let Some(r) = self.row.as_mut()
        {
            ghost.unknown.push((r.fingerprint, r.fence, now));
            r.state = RowState::Unknown;
            r.lease_expires_at = None;
        }
        if self.expired(now, pending_may_go, params)
            && let Some(r) = self.row.take()
        {
            ghost.deleted(Displaced::of(&r, now));
        }
    }
}

/// Every statement this file mirrors, by its path under `keyflight_store_core::sql`. The
/// statements are pinned by value (`tests/sql_pinned.rs`); one of these that changes fails
/// there until this mirror is checked against it (`docs/model.md#keeping-the-mirror-honest`).
pub const MIRRORED: [&str; 14] = [
    "claim::CLAIM_SQL",
    "claim::READ_SQL",
    "lease::RENEW_SQL",
    "lease::FINALIZE_SQL",
    "lease::RELEASE_COOLDOWN_SQL",
    "lease::RELEASE_UNKNOWN_SQL",
    "lease::RELEASE_FORGET_SQL",
    "lease::OWNER_SQL",
    "retention::DELETE_EXPIRED_SQL",
    "held::HOLD_ABANDONED_SQL",
    "orphan::RELEASE_ORPHAN_SQL",
    "orphan::GIVE_BACK_SQL",
    "reconciled::RECONCILED_COMMITTED_SQL",
    "reconciled::RECONCILED_ABSENT_SQL",
];
