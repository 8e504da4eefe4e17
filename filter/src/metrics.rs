//! F13: the names of the filter's counters.
//!
//! The state machine emits [`Metric`] values; the adapter defines one Envoy
//! counter per name at start-up and increments it. Keeping the list here (and
//! not in the adapter) lets native tests assert what a flow counted.

/// One outcome per guarded request: how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Won, ran upstream, recorded replayable.
    WonCompleted,
    /// Served a recorded response the lease-store returned.
    Replay,
    /// Served a recorded response from this proxy's edge cache, with no
    /// lease-store call (F9).
    ReplayEdgeCache,
    /// Same key, different request.
    Conflict,
    /// The winner was still running after the follower's wait.
    InProgressTimeout,
    /// Recorded as failed (retryable cooldown), or refused during a cooldown.
    Failed,
    /// Won and ran, but the response was too large to keep.
    CompletedUncacheable,
    /// Passed without a claim (policy matched, no key; or `failure_mode: open`).
    Unguarded,
    /// Refused before any claim: bad or missing key, no principal, body too large.
    RejectedInvalid,
    /// The lease-store could not answer (`failure_mode: closed`).
    JournalUnavailable,
    /// Won, but the answer was released unrecorded (a `forget_statuses` answer).
    NotRecorded,
    /// Refused: the recorded response is not replayable.
    NotReplayable,
    /// Refused or recorded as `unknown` (needs an operator).
    OperationUnknown,
}

impl Outcome {
    /// Every outcome, for defining the counters.
    pub const ALL: [Outcome; 13] = [
        Outcome::WonCompleted,
        Outcome::Replay,
        Outcome::ReplayEdgeCache,
        Outcome::Conflict,
        Outcome::InProgressTimeout,
        Outcome::Failed,
        Outcome::CompletedUncacheable,
        Outcome::Unguarded,
        Outcome::RejectedInvalid,
        Outcome::JournalUnavailable,
        Outcome::NotRecorded,
        Outcome::NotReplayable,
        Outcome::OperationUnknown,
    ];

    /// The counter's name suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::WonCompleted => "won_completed",
            Outcome::Replay => "replay",
            Outcome::ReplayEdgeCache => "replay_edge_cache",
            Outcome::Conflict => "conflict",
            Outcome::InProgressTimeout => "in_progress_timeout",
            Outcome::Failed => "failed",
            Outcome::CompletedUncacheable => "completed_uncacheable",
            Outcome::Unguarded => "unguarded",
            Outcome::RejectedInvalid => "rejected_invalid",
            Outcome::JournalUnavailable => "journal_unavailable",
            Outcome::NotRecorded => "not_recorded",
            Outcome::NotReplayable => "not_replayable",
            Outcome::OperationUnknown => "operation_unknown",
        }
    }
}

/// Events along the way (several per request possible).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Won a fresh claim.
    Claimed,
    /// Won by reusing a record past retention.
    RecoveredTtl,
    /// Won by stealing an expired lease or elapsed cooldown.
    RecoveredAbandoned,
    /// A same-fingerprint follower long-polled the whole `follower_wait`
    /// and the winner was still running (F5).
    FollowerWait,
    /// A follower was refused during a failure cooldown.
    RetryableCooldown,
    /// Finalize, release or renew found the lease stolen.
    LeaseStolen,
    /// A renew call failed.
    RenewError,
    /// A finalize call failed.
    FinalizeError,
    /// A release call failed.
    ReleaseError,
    /// `failure_mode: open` let a request through unguarded.
    FailOpen,
    /// The caller went away before the winner's record was settled; the
    /// outbox settles it (F14).
    CallerGone,
    /// A won claim's answer came too late to renew its lease in time: the
    /// request was not forwarded and the claim is released
    /// (`docs/stream-machine.md#the-claim`).
    ClaimAnsweredLate,
    /// The operator epoch question failed (refused by the host, no answer,
    /// an error status such as an AuthorizationPolicy's 403): past
    /// `edge_cache.max_staleness_ms` the edge cache is off (F9).
    EpochFailed,
    /// The request's `:method`, `:path` or `:authority` is not UTF-8
    /// (`docs/identity.md#matching-policies`): refused when a policy could
    /// guard it, else passed.
    TargetUndecodable,
    /// Under `record: after_reply`, an answer went out before its record
    /// landed: the outbox records it (F7).
    RecordedAfterReply,
    /// A large JSON body's digest came from the body-digest memo (the same
    /// bytes were fingerprinted before): it was not canonicalized again
    /// (`docs/stream-machine.md#the-body-digest-memo`).
    BodyDigestRemembered,
    /// A follower's long-poll claim joined the same claim its worker already had in
    /// flight, and shares its answer (`docs/stream-machine.md#herds`).
    HerdJoined,
    /// Under `uncertain: reconcile`, the service answered `committed`: its answer was
    /// recorded and replayed (`docs/reconcile.md`).
    ReconcileCommitted,
    /// The service answered `absent` (the run is fenced out): the request claimed again.
    ReconcileAbsent,
    /// The service gave no usable answer (none, an error status, a malformed body, or one
    /// about another scope or fence), or the store refused the report: the record stays
    /// `unknown`.
    ReconcileUnanswered,
    /// The driver found the worker's shared state borrowed where the host's one-callback-
    /// at-a-time rule says it cannot be: a bug, logged at error (`drive/worker/shared.rs`).
    BorrowConflict,
}

impl EventKind {
    /// Every event, for defining the counters.
    pub const ALL: [EventKind; 21] = [
        EventKind::Claimed,
        EventKind::RecoveredTtl,
        EventKind::RecoveredAbandoned,
        EventKind::FollowerWait,
        EventKind::RetryableCooldown,
        EventKind::LeaseStolen,
        EventKind::RenewError,
        EventKind::FinalizeError,
        EventKind::ReleaseError,
        EventKind::FailOpen,
        EventKind::CallerGone,
        EventKind::ClaimAnsweredLate,
        EventKind::EpochFailed,
        EventKind::TargetUndecodable,
        EventKind::RecordedAfterReply,
        EventKind::BodyDigestRemembered,
        EventKind::HerdJoined,
        EventKind::ReconcileCommitted,
        EventKind::ReconcileAbsent,
        EventKind::ReconcileUnanswered,
        EventKind::BorrowConflict,
    ];

    /// The counter's name suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Claimed => "claimed",
            EventKind::RecoveredTtl => "recovered_ttl",
            EventKind::RecoveredAbandoned => "recovered_abandoned",
            EventKind::FollowerWait => "follower_wait",
            EventKind::RetryableCooldown => "retryable_cooldown",
            EventKind::LeaseStolen => "lease_stolen",
            EventKind::RenewError => "renew_error",
            EventKind::FinalizeError => "finalize_error",
            EventKind::ReleaseError => "release_error",
            EventKind::FailOpen => "fail_open",
            EventKind::CallerGone => "caller_gone",
            EventKind::ClaimAnsweredLate => "claim_answered_late",
            EventKind::EpochFailed => "epoch_failed",
            EventKind::TargetUndecodable => "target_undecodable",
            EventKind::RecordedAfterReply => "recorded_after_reply",
            EventKind::BodyDigestRemembered => "body_digest_remembered",
            EventKind::HerdJoined => "herd_joined",
            EventKind::ReconcileCommitted => "reconcile_committed",
            EventKind::ReconcileAbsent => "reconcile_absent",
            EventKind::ReconcileUnanswered => "reconcile_unanswered",
            EventKind::BorrowConflict => "borrow_conflict",
        }
    }
}

/// What the record outbox did (F14), one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxEvent {
    /// A stream handed its claim off: the outbox delivers its record.
    TakenOver,
    /// The outbox dispatched a settle call (each attempt).
    Retried,
    /// A handed-off record landed.
    Delivered,
    /// A record was recorded as not replayable instead: the store refused the
    /// full response, or it did not fit the outbox.
    Downgraded,
    /// A hand-off did not fit the outbox even downgraded.
    Full,
    /// The store answered `lease_lost` to a delivery: another claim owns the record.
    Lost,
    /// The outbox stopped trying (budget spent, store refused, or full): the
    /// lease expires and one same-body retry may run again.
    GivenUp,
}

impl OutboxEvent {
    /// Every outbox event, for defining the counters.
    pub const ALL: [OutboxEvent; 7] = [
        OutboxEvent::TakenOver,
        OutboxEvent::Retried,
        OutboxEvent::Delivered,
        OutboxEvent::Downgraded,
        OutboxEvent::Full,
        OutboxEvent::Lost,
        OutboxEvent::GivenUp,
    ];

    /// The counter's name suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxEvent::TakenOver => "taken_over",
            OutboxEvent::Retried => "retried",
            OutboxEvent::Delivered => "delivered",
            OutboxEvent::Downgraded => "downgraded",
            OutboxEvent::Full => "full",
            OutboxEvent::Lost => "lost",
            OutboxEvent::GivenUp => "given_up",
        }
    }
}

/// Gauges: values every worker adds its own changes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gauge {
    /// `keyflight.outbox.depth`: records the outboxes are delivering.
    OutboxDepth,
    /// `keyflight.outbox.bytes`: bytes those records hold.
    OutboxBytes,
}

impl Gauge {
    /// Every gauge, for defining them.
    pub const ALL: [Gauge; 2] = [Gauge::OutboxDepth, Gauge::OutboxBytes];

    /// The Envoy stat name.
    pub fn name(self) -> &'static str {
        match self {
            Gauge::OutboxDepth => "keyflight.outbox.depth",
            Gauge::OutboxBytes => "keyflight.outbox.bytes",
        }
    }
}

/// A counter increment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// `keyflight.outcome.<name>`.
    Outcome(Outcome),
    /// `keyflight.event.<name>`.
    Event(EventKind),
    /// `keyflight.dry_run.<name>`: what enforce mode would have done.
    DryRun(Outcome),
    /// `keyflight.outbox.<name>` (F14).
    Outbox(OutboxEvent),
}

impl Metric {
    /// Every counter the filter may increment.
    pub fn all() -> impl Iterator<Item = Metric> {
        Outcome::ALL
            .into_iter()
            .map(Metric::Outcome)
            .chain(EventKind::ALL.into_iter().map(Metric::Event))
            .chain(Outcome::ALL.into_iter().map(Metric::DryRun))
            .chain(OutboxEvent::ALL.into_iter().map(Metric::Outbox))
    }

    /// The Envoy stat name.
    pub fn name(self) -> String {
        match self {
            Metric::Outcome(o) => format!("keyflight.outcome.{}", o.as_str()),
            Metric::Event(e) => format!("keyflight.event.{}", e.as_str()),
            Metric::DryRun(o) => format!("keyflight.dry_run.{}", o.as_str()),
            Metric::Outbox(e) => format!("keyflight.outbox.{}", e.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names: Vec<String> = Metric::all().map(Metric::name).collect();
        names.extend(Gauge::ALL.map(|g| g.name().to_owned()));
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"keyflight.outcome.won_completed".to_owned()));
        assert!(names.contains(&"keyflight.event.claimed".to_owned()));
        assert!(names.iter().all(|n| n.starts_with("keyflight.")));
    }
}
