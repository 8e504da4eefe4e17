//! What the counters are labelled with: the events and sheds the handlers report, and the
//! label sets, every value a `&'static str` from an enum or an allowlisted id.

use prometheus_client::encoding::EncodeLabelSet;

/// Something that happened to a lease (the event counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A claim won a fresh scope.
    Claimed,
    /// A claim reused a record past its retention.
    RecoveredTtl,
    /// A claim took over an expired lease or an elapsed cooldown.
    RecoveredAbandoned,
    /// A claim long-polled for another caller's outcome.
    FollowerWait,
    /// A renew, finalize or release found its lease taken over.
    LeaseLost,
    /// A lease was renewed.
    Renew,
    /// A response was recorded.
    Finalize,
    /// A lease was released.
    Release,
    /// An operator erased a record.
    Erase,
    /// An operator resolved an `unknown` record.
    Resolve,
    /// A filter settled an `unknown` record with the service's answer `committed`.
    ReconciledCommitted,
    /// A filter settled an `unknown` record with the service's answer `absent`.
    ReconciledAbsent,
}

impl Event {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Event::Claimed => "claimed",
            Event::RecoveredTtl => "recovered_ttl",
            Event::RecoveredAbandoned => "recovered_abandoned",
            Event::FollowerWait => "follower_wait",
            Event::LeaseLost => "lease_lost",
            Event::Renew => "renew",
            Event::Finalize => "finalize",
            Event::Release => "release",
            Event::Erase => "erase",
            Event::Resolve => "resolve",
            Event::ReconciledCommitted => "reconciled_committed",
            Event::ReconciledAbsent => "reconciled_absent",
        }
    }
}

/// Why the store turned work away at once instead of queueing it
/// (`docs/configuration.md#limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    /// A connection past `--max-connections`, closed when accepted.
    Connections,
    /// A `/v1` call past `--max-concurrent-requests`, answered 503.
    Concurrency,
    /// A `/v1` call past its caller's share of `--max-concurrent-requests` while other
    /// callers were active, answered 503 (`crate::shares`).
    CallerShare,
    /// A call whose body would pass the body budget, answered 503 before it is read.
    BodyBudget,
    /// A call whose answer would pass the answer budget, answered 503 instead.
    AnswerBudget,
    /// A call past its caller's share of `--max-answer-bytes-per-second` while other
    /// callers were active, answered 503 (`crate::api::answer_rate`).
    AnswerRate,
    /// A connection whose reader took nothing for `--write-timeout`, closed.
    WriteTimeout,
    /// A long-poll past `--max-waiters-per-scope`, answered `in_progress` at once.
    LongPollScope,
    /// A long-poll past `--max-waiters`, answered `in_progress` at once.
    LongPollTotal,
    /// A long-poll past its caller's share of `--max-waiters` while other callers were
    /// active, answered `in_progress` at once (`crate::shares`).
    LongPollShare,
}

impl Shed {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Shed::Connections => "connections",
            Shed::Concurrency => "concurrency",
            Shed::CallerShare => "caller_share",
            Shed::BodyBudget => "body_budget",
            Shed::AnswerBudget => "answer_budget",
            Shed::AnswerRate => "answer_rate",
            Shed::WriteTimeout => "write_timeout",
            Shed::LongPollScope => "longpoll_scope",
            Shed::LongPollTotal => "longpoll_total",
            Shed::LongPollShare => "longpoll_share",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    pub(super) reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabel {
    pub(super) outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct EventLabel {
    pub(super) event: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CodeLabel {
    pub(super) code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RouteLabel {
    pub(super) route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WorkloadLabel {
    pub(super) workload: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RefusedLabel {
    pub(super) workload: String,
    pub(super) reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: &'static str,
}
