//! Orphan claims: won in the database, never answered to their caller
//! (`docs/records.md#orphan-claims`).
//!
//! A claim statement can commit after its caller stopped waiting: the HTTP call was
//! dropped while the statement ran (the proxy timed out and reset it), the answer bound of
//! [`Store::run`] fired while the database was still working on it (a frozen replica or
//! database that resumed), or a group-commit batch finished after its callers gave up.
//! Nobody then holds the claim's `claim_id` — it is only ever sent in the answer that was
//! never delivered — so nobody renews or settles the lease: the key would answer
//! `in_progress` for a whole lease, and its takeover would be counted `recovered_abandoned`,
//! as if a winner had died after running the request.
//!
//! Each claim attempt is therefore guarded from the moment its statement is sent until its
//! answer is handed back ([`OrphanGuard`]); a batch checks that its caller took the answer.
//! A claim that was not delivered is released by its `claim_id` ([`OrphanRelease`]): a claim
//! that took an earlier request's record over gives it back, `failed` with its cooldown over,
//! so the key stays that request's, and so does a guarded claim whose statement was never
//! read (how it won is unknown); any other is deleted, the `forget` release's own fenced
//! `DELETE`. That is safe whatever happened: no caller holds that id, and a row that carries
//! another id (the claim lost, or was taken over since) matches nothing. Whether the
//! statement committed may not be known yet, so the release retries until the statement is
//! surely over (its answer bound, counted again from the database's first answer after an
//! attempt it left unanswered: [`ReleaseDeadline`]), and through an outage for as long as an
//! outbox would.
//!
//! During an outage nearly every call fails that way, and most of those never reached a
//! database at all (a partition that refuses connections behind its router). So at most
//! [`MAX_RELEASES_IN_FLIGHT`] releases retry at once: past that, a possible orphan is left
//! to its lease, as one whose replica died is, rather than have retries take the pool from
//! the calls that can still be served (`docs/records.md#orphan-claims`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use keyflight_protocol::Digest;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::WonHow;
pub(super) use keyflight_store_core::orphan::OrphanRelease;
use keyflight_store_core::orphan::ReleaseDeadline;
use uuid::Uuid;

use super::partitions::Routed;
use super::{Store, StoreError};
use crate::log_limit::{self, Kind};

pub(super) use keyflight_store_core::routed::RELEASE_ORPHAN;

pub(super) use keyflight_store_core::routed::GIVE_BACK;

/// The statement of `release` (`keyflight_store_core::orphan::OrphanRelease`).
pub(super) fn statement(release: OrphanRelease) -> &'static Routed {
    match release {
        OrphanRelease::Delete => &RELEASE_ORPHAN,
        OrphanRelease::GiveBack => &GIVE_BACK,
    }
}

/// Most releases retrying in the background at once, each holding a pooled connection only
/// while it runs a statement.
pub const MAX_RELEASES_IN_FLIGHT: usize = 512;

/// How long a release keeps retrying while the database does not answer: the outbox's
/// default budget (`docs/record-outbox.md#delivery`).
const RELEASE_BUDGET: Duration = Duration::from_secs(120);
/// First pause between release attempts; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between release attempts, the outbox's cap.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Guards one claim attempt: dropped before [`OrphanGuard::delivered`], it releases the
/// claim in the background.
pub(super) struct OrphanGuard {
    store: Store,
    scope: Digest,
    claim_id: Uuid,
    armed: bool,
    /// What its release leaves: [`OrphanRelease::UNREAD`] until the claim's row is read.
    release: OrphanRelease,
}

impl OrphanGuard {
    /// Guards the claim `claim_id` on `scope`, whose statement is about to be sent.
    pub(super) fn new(store: &Store, scope: Digest, claim_id: Uuid) -> OrphanGuard {
        OrphanGuard {
            store: store.clone(),
            scope,
            claim_id,
            armed: true,
            release: OrphanRelease::UNREAD,
        }
    }

    /// The claim's row was read: it won `how`, so a release after this knows what to leave.
    pub(super) fn won(&mut self, how: WonHow) {
        self.release = OrphanRelease::after(how);
    }

    /// The attempt's answer is in the caller's hands (or it lost: nothing to release).
    pub(super) fn delivered(mut self) {
        self.armed = false;
    }
}

impl Drop for OrphanGuard {
    fn drop(&mut self) {
        if self.armed {
            // Until the answer bound has passed, the statement may still commit.
            let settled_by = Instant::now() + self.store.answer_timeout;
            self.store
                .release_orphan(self.scope, self.claim_id, settled_by, self.release);
        }
    }
}

impl Store {
    /// Releases, in the background, a claim whose answer its caller never got; the
    /// claim's statement is surely over (committed or not) by `settled_by`.
    pub(super) fn release_orphan(
        &self,
        scope: Digest,
        claim_id: Uuid,
        settled_by: Instant,
        release: OrphanRelease,
    ) {
        self.spawn_release(scope, claim_id, settled_by, None, release);
    }

    /// For a claim whose release just found nothing: one more look once its statement is
    /// surely over (`settled_by`), in case it committed late — rather than a retry every
    /// few hundred milliseconds until then, which through one partition's outage would add
    /// several statements per call to the partitions that still serve (`batch/claims.rs`).
    pub(super) fn release_orphan_if_late(
        &self,
        scope: Digest,
        claim_id: Uuid,
        settled_by: Instant,
    ) {
        self.spawn_release(
            scope,
            claim_id,
            settled_by,
            Some(settled_by),
            OrphanRelease::Delete,
        );
    }

    /// Spawns the release, first waiting until `start_at` when given.
    fn spawn_release(
        &self,
        scope: Digest,
        claim_id: Uuid,
        settled_by: Instant,
        start_at: Option<Instant>,
        release: OrphanRelease,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(permit) = Arc::clone(&self.orphan_releases).try_acquire_owned() else {
            if let Some(suppressed) = log_limit::global().admit(Kind::OrphanLeftToLease) {
                tracing::warn!(
                    scope = %scope.to_hex(),
                    in_flight = MAX_RELEASES_IN_FLIGHT,
                    suppressed,
                    "too many orphan releases retrying; this possible orphan claim is left to \
                     its lease"
                );
            }
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            if let Some(start_at) = start_at {
                tokio::time::sleep_until(start_at.into()).await;
            }
            store
                .release_until_done(scope, claim_id, settled_by, release)
                .await;
            drop(permit);
        });
    }

    /// Releases retrying in the background now.
    pub fn orphan_releases_in_flight(&self) -> usize {
        MAX_RELEASES_IN_FLIGHT - self.orphan_releases.available_permits()
    }

    async fn release_until_done(
        &self,
        scope: Digest,
        claim_id: Uuid,
        settled_by: Instant,
        release: OrphanRelease,
    ) {
        let give_up_at = settled_by + RELEASE_BUDGET;
        // The deadline's milliseconds count from now.
        let epoch = Instant::now();
        let at = |t: Instant| millis(t.saturating_duration_since(epoch));
        let mut deadline = ReleaseDeadline::new(at(settled_by), millis(self.answer_timeout));
        let mut backoff = MIN_BACKOFF;
        loop {
            match self.release_orphan_once(&scope, claim_id, release).await {
                Ok(Some(fence)) => {
                    self.orphan_released(&scope, claim_id, fence, release);
                    return;
                }
                Ok(None) => {
                    if !deadline.found_nothing(at(Instant::now())) {
                        return;
                    }
                }
                Err(e) => {
                    if Instant::now() >= give_up_at {
                        if let Some(suppressed) = log_limit::global().admit(Kind::OrphanLeftToLease)
                        {
                            tracing::warn!(
                                scope = %scope.to_hex(),
                                error = %e,
                                suppressed,
                                "could not release a possible orphan claim; its lease will expire"
                            );
                        }
                        return;
                    }
                    deadline.unanswered();
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Counts and logs (an evidence line) an orphan claim released.
    pub(super) fn orphan_released(
        &self,
        scope: &Digest,
        claim_id: Uuid,
        fence: i64,
        release: OrphanRelease,
    ) {
        self.orphans_released.inc();
        crate::evidence::orphan_released(scope, claim_id, fence, release.leaves());
    }

    /// One attempt: the fence released, or `None` when no pending row carries `claim_id`.
    pub(super) async fn release_orphan_once(
        &self,
        scope: &Digest,
        claim_id: Uuid,
        release: OrphanRelease,
    ) -> Result<Option<i64>, StoreError> {
        self.run(async |client| {
            let statement = client.prepare_cached(self.sql(statement(release))).await?;
            let row = client
                .query_opt(&statement, &[&scope.0.as_slice(), &claim_id])
                .await?;
            Ok(row.map(|row| row.try_get::<_, i64>(0)).transpose()?)
        })
        .await
    }

    /// Orphan claims this store released (`/metrics`).
    pub fn orphans_released(&self) -> u64 {
        self.orphans_released.get()
    }

    /// The counter behind [`Store::orphans_released`], for the metrics registry.
    pub fn orphans_released_counter(&self) -> prometheus_client::metrics::counter::Counter {
        self.orphans_released.clone()
    }
}
