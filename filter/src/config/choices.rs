//! The named choices a policy or the whole configuration makes — rollout mode, what an
//! anonymous or delegated caller gets, failure and uncertainty handling, when a record is
//! written, what a retry sees — each an enum read straight from the JSON, so the state
//! machine matches on a name and never on a string.

use std::time::Duration;

use serde::Deserialize;

/// F11 rollout mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Block, wait and replay (default).
    #[default]
    Enforce,
    /// Claim and record, never block or replay; count what enforce would do.
    DryRun,
}

/// K2: what happens to a keyed request without a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anonymous {
    /// 401 `principal_required` (default).
    #[default]
    Reject,
    /// All unauthenticated callers share one scope.
    Shared,
}

/// K2: how an actor and a subject, both present, make the principal
/// (`docs/identity.md#the-delegated-principal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delegation {
    /// The actor alone is the principal: every user one service acts for shares that
    /// service's scope, and is answered with each other's records.
    Actor,
    /// The pair (subject, actor) is the principal (default), so each user keeps a scope of
    /// their own behind each party acting for them.
    #[default]
    SubjectAndActor,
}

/// F0: whether a policy's path matching folds case
/// (`docs/identity.md#matching-policies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathCase {
    /// Every case of the path matches (default): Express, ASP.NET Core and
    /// IIS route case-insensitively, so `/PAYMENTS` may run the handler.
    #[default]
    Insensitive,
    /// Only the case as written matches: for an upstream known to route
    /// case-sensitively, where `/PAYMENTS` is another resource.
    Sensitive,
}

/// F2: what a guarded request does when the lease-store cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// 503 `journal_unavailable`; the upstream is never called (default).
    #[default]
    Closed,
    /// Pass the request unguarded (counted).
    Open,
}

/// F6: what an uncertain upstream outcome (reset, timeout, proxy-generated 5xx) records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Uncertain {
    /// Record `failed` with the cooldown; a same-body retry may run again: for upstreams
    /// that are idempotent by themselves (`filter/README.md#policy`).
    Retry,
    /// Record `unknown`: nothing runs again until an operator decides
    /// (`docs/records.md#operators`). The default: an outcome nobody knows never means a
    /// second charge (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
    #[default]
    Hold,
    /// Record the proxy's answer (504, 503) and replay it, as the IETF draft asks of an
    /// intermediary; with no answer to record (the caller left), `unknown` as under `Hold`.
    Record,
    /// Record `unknown` as `Hold` does, and ask the service what happened when a retry
    /// meets the record: its ledger's answer settles it (`docs/reconcile.md`). Needs the
    /// policy's `reconcile` endpoint.
    Reconcile,
}

impl Uncertain {
    /// Every setting, for the rules that must hold under each (`crate::guarantee`).
    pub const ALL: [Uncertain; 4] = [
        Uncertain::Retry,
        Uncertain::Hold,
        Uncertain::Record,
        Uncertain::Reconcile,
    ];
}

/// Where a policy under `uncertain: reconcile` asks the service what became of a run
/// (`docs/reconcile.md#the-question`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    /// The Envoy cluster of the service.
    pub cluster: String,
    /// `:authority` of the question.
    pub authority: String,
    /// The endpoint's path; callers' requests to it are refused at the edge.
    pub path: String,
    /// How long the question may take.
    pub timeout: Duration,
    /// The VM environment variable holding keyflight's bearer token for the service.
    pub token_env: Option<String>,
    /// `Retry-After` of a `409 operation_unknown` while the service has not answered.
    pub retry_after_s: u64,
}

/// F6: what the upstream's own 5xx answer records
/// (`docs/stream-machine.md#the-ietf-drafts-semantics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerErrors {
    /// Release as a cooldown: a same-body retry may run again after it (default).
    #[default]
    Cooldown,
    /// Record and replay it like any other answer, as Stripe does.
    Record,
}

/// F7: when a recorded answer reaches its caller
/// (`docs/stream-machine.md#recording-after-the-reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordWhen {
    /// The answer waits for its finalize to land, so it replays from the moment
    /// the caller has it (default).
    #[default]
    BeforeReply,
    /// The answer goes out at once and the record outbox lands the finalize: one
    /// lease-store round trip less for the caller, and an answer lost with its proxy
    /// if the proxy dies before the record lands.
    AfterReply,
}

/// F3, F5: what a request gets while the original with its key still runs
/// (`docs/stream-machine.md#the-ietf-drafts-semantics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InProgress {
    /// Long-poll up to `follower_wait_ms` and replay, else `request_in_progress`
    /// with the status profile's status (default).
    #[default]
    Wait,
    /// 409 `request_in_progress` with `Retry-After` at once, as the IETF draft has it.
    Conflict,
}

/// F15: what Envoy's router may do with a guarded request the filter forwards.
///
/// A route's retry policy resends the request upstream inside one stream, after
/// the claim and out of the filter's sight: a retry on a reset, a 5xx or a
/// per-try timeout runs the operation again under the same fence
/// (`router_retries.rs` says which Envoy conditions are safe and why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouterRetries {
    /// The router sends a guarded request once, whatever the route or the
    /// caller asks for (default). A connection failure is then answered by
    /// Envoy (503) and recorded as a plain retryable failure.
    #[default]
    Off,
    /// The route's retry policy applies; only retry headers from the caller or
    /// an earlier filter are dropped. For routes whose `retry_on` names only
    /// conditions where the request never reached the upstream.
    Route,
}
