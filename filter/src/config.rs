//! The plugin configuration (F12): parsed once, in `on_configure`, into
//! validated types so the per-request path never re-checks a value.
//!
//! Two layers: `raw` mirrors the JSON exactly (serde, `deny_unknown_fields`,
//! every optional field an `Option` so a default is applied in one visible
//! place), and [`Config`] is what the state machine reads (durations, compiled
//! matchers, lowercase header sets). Every error names the field path
//! (`policies[0].lease_ms: …`) because it becomes the one log line an operator
//! sees when the plugin refuses to start.
//!
//! This file holds [`Config`], [`Identity`] and [`Policy`], the types the state machine
//! reads; the choices they name are `choices.rs`, the lease-store settings `store.rs`, the
//! outbox and edge-cache bounds `bounds.rs`, policy matching `matcher.rs`; `raw.rs`,
//! `validate.rs` and `policy.rs` turn the JSON into them.

mod bounds;
mod choices;
mod matcher;
mod policy;
mod raw;
mod store;
mod validate;

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

pub use bounds::{
    DEFAULT_EDGE_CACHE_MAX_BYTES, DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES,
    DEFAULT_EDGE_CACHE_MAX_STALENESS_MS, DEFAULT_EDGE_CACHE_TTL_S, DEFAULT_OUTBOX_MAX_BYTES,
    DEFAULT_RECORD_RETRY_BUDGET_MS, EdgeCache, Outbox,
};
pub use choices::{
    Anonymous, Delegation, FailureMode, InProgress, Mode, PathCase, Reconcile, RecordWhen,
    RouterRetries, ServerErrors, Uncertain,
};
pub use keyflight_protocol::problem::StatusProfile;
use keyflight_protocol::{PrincipalSource, ProblemCode, ScopeMode, Target};
pub use matcher::{AuthorityPattern, Matcher, Unreadable, fold_case};
use store::is_token_text;
pub use store::{DEFAULT_STORE_MAX_BODY_BYTES, DEFAULT_TOKEN_ENV, LeaseStore, TokenSource};

pub use crate::recipe::PreviousRecipe;
pub use validate::{finalize_bytes, parse_plugin_config};

/// Default key header (K1).
pub const DEFAULT_KEY_HEADER: &str = "idempotency-key";
/// Default methods a policy matches.
pub const DEFAULT_METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];
/// Default fingerprint headers (K4): one list, shared with `keyflight fingerprint`.
pub use keyflight_protocol::fingerprint::DEFAULT_FINGERPRINT_HEADERS;

/// Recorded and replayed whatever a policy's allowlist says, because the
/// recorded body means nothing without them: a body the upstream encoded
/// (despite the `accept-encoding: identity` a guarded request carries
/// upstream) replays with its coding named, never as raw gzip.
pub const ALWAYS_RECORDED: [&str; 1] = ["content-encoding"];

/// Why the configuration was refused: the field path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Where in the JSON, e.g. `policies[0].lease_ms`.
    pub path: String,
    /// What is wrong with the value.
    pub message: String,
}

impl ConfigError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The validated plugin configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// How to reach the lease-store.
    pub lease_store: LeaseStore,
    /// The key header, lowercase.
    pub key_header: String,
    /// Enforce or dry run.
    pub mode: Mode,
    /// Which statuses errors use.
    pub status_profile: StatusProfile,
    /// Where the principal comes from.
    pub identity: Identity,
    /// Ordered policies; the first match wins.
    pub policies: Vec<Rc<Policy>>,
    /// The edge replay cache (F9); `None` when disabled.
    pub edge_cache: Option<EdgeCache>,
    /// The record outbox's bound (F14).
    pub outbox: Outbox,
}

/// Where the effective principal comes from (K2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// On-behalf-of sources, tried first, in order.
    pub actor: Vec<Rc<PrincipalSource>>,
    /// Caller (subject) sources, tried in order when no actor is present, or paired
    /// with the actor under [`Delegation::SubjectAndActor`].
    pub principal: Vec<Rc<PrincipalSource>>,
    /// Whether an actor and a subject, both present, make a delegated principal.
    pub delegation: Delegation,
    /// Names that never count as a principal, whichever source reads them:
    /// a peer such as the ingress gateway, whose identity would put every
    /// user behind it into one scope (`docs/identity.md#the-principal`).
    pub not_principals: BTreeSet<String>,
    /// The sources before the last change, while proxies may still run them: every claim
    /// also carries the request's scope under them
    /// (`docs/stream-machine.md#recipe-transitions`). Never itself has a previous, and
    /// never tells fewer callers apart than the current sources
    /// (`docs/identity.md#previous-recipes`).
    pub previous: Option<Box<Identity>>,
}

impl Identity {
    /// Whether `other` reads principals exactly as this does (its `previous` aside).
    pub fn same_sources(&self, other: &Identity) -> bool {
        self.actor == other.actor
            && self.principal == other.principal
            && self.delegation == other.delegation
            && self.not_principals == other.not_principals
    }
}

/// One validated policy (F12).
#[derive(Debug, Clone)]
pub struct Policy {
    /// Unique name, used in logs.
    pub name: String,
    /// Which requests it guards.
    pub matcher: Matcher,
    /// 400 `idempotency_key_required` when the key is absent.
    pub require_key: bool,
    /// Route or service scope (K3).
    pub scope: ScopeMode,
    /// The recipe the policy computed identities with before its last change, claimed
    /// together with the current one (`docs/stream-machine.md#recipe-transitions`).
    pub previous: Option<PreviousRecipe>,
    /// Requests without a principal.
    pub anonymous: Anonymous,
    /// Lease granted to a winner.
    pub lease: Duration,
    /// How often a running winner renews (F4); always shorter than `lease`.
    pub renew_interval: Duration,
    /// Long-poll budget of a same-fingerprint follower (F5).
    pub follower_wait: Duration,
    /// Record retention (L5).
    pub retention: Duration,
    /// Cooldown after a retryable failure (F6).
    pub failure_cooldown: Duration,
    /// Request body cap (F1).
    pub max_request_body_bytes: usize,
    /// Largest response body kept for replay (F6).
    pub max_cacheable_response_bytes: usize,
    /// Full replay allowlist: defaults plus configured, lowercase (F8).
    pub replay_headers: BTreeSet<String>,
    /// Headers that enter the fingerprint, lowercase (K4).
    pub fingerprint_headers: Vec<String>,
    /// Lease-store failure behaviour (F2).
    pub failure_mode: FailureMode,
    /// Uncertain outcomes (F6).
    pub uncertain: Uncertain,
    /// The service's reconcile endpoint, under `uncertain: reconcile`.
    pub reconcile: Option<Rc<Reconcile>>,
    /// The upstream's own 5xx answers (F6).
    pub server_errors: ServerErrors,
    /// When a recorded answer reaches its caller (F7).
    pub record: RecordWhen,
    /// The status of `idempotency_conflict`: 409 or 422 (F3).
    pub mismatch_status: u16,
    /// What a request gets while the original runs (F3, F5).
    pub in_progress: InProgress,
    /// What Envoy's router may retry (F15).
    pub router_retries: RouterRetries,
    /// Whether this policy's records use the edge replay cache (F9).
    pub edge_cache: bool,
    /// The 3xx and 4xx answers released unrecorded, so a retry runs again (F6).
    pub forget_statuses: BTreeSet<u16>,
    /// How long the outbox keeps resending a record it took over (F14).
    pub record_retry_budget: Duration,
}

impl Policy {
    /// F10: the status of `code` on this policy's routes: its own
    /// `mismatch_status` and `in_progress` first, then the status profile
    /// (`docs/stream-machine.md#local-replies`).
    pub fn status_of(&self, code: ProblemCode, profile: StatusProfile) -> u16 {
        match code {
            ProblemCode::IdempotencyConflict => self.mismatch_status,
            ProblemCode::RequestInProgress if self.in_progress == InProgress::Conflict => 409,
            _ => code.status_under(profile),
        }
    }
}

impl Config {
    /// The first policy matching the request.
    pub fn match_policy(&self, target: &Target) -> Option<&Rc<Policy>> {
        self.policies.iter().find(|p| p.matcher.matches(target))
    }

    /// The first policy that could match a request whose target was read
    /// only partly (see [`Matcher::matches_read`]).
    pub fn match_policy_read(
        &self,
        target: &Target,
        unreadable: Unreadable,
    ) -> Option<&Rc<Policy>> {
        self.policies
            .iter()
            .find(|p| p.matcher.matches_read(target, unreadable))
    }

    /// Whether `path` is a policy's reconcile endpoint, which callers may not reach
    /// through the filter (`docs/reconcile.md#who-may-ask`).
    pub fn reserves(&self, path: &str) -> bool {
        self.policies
            .iter()
            .filter_map(|policy| policy.reconcile.as_deref())
            .any(|reconcile| crate::reconcile::is_reserved(path, reconcile))
    }

    /// The edge cache to use for `policy`'s records and for how long, or
    /// `None` when the cache is off (globally, for the policy, or in
    /// `dry_run`, where every request claims so the store sees the whole
    /// mesh's traffic). The time an entry is served never exceeds the
    /// policy's retention (F9).
    pub fn edge_cache_for(&self, policy: &Policy) -> Option<(EdgeCache, Duration)> {
        if self.mode == Mode::DryRun || !policy.edge_cache {
            return None;
        }
        let cache = self.edge_cache?;
        Some((cache, cache.ttl.min(policy.retention)))
    }

    /// The edge cache's bounds when any request can use it: enforce mode and
    /// at least one policy with `edge_cache` on. Only then does a worker need
    /// to hear the lease-store's operator epoch.
    pub fn edge_cache_in_use(&self) -> Option<EdgeCache> {
        let used = self.mode == Mode::Enforce && self.policies.iter().any(|p| p.edge_cache);
        self.edge_cache.filter(|_| used)
    }

    /// The tick period the adapter needs to renew leases and ask for the edge
    /// cache's operator epoch on time: a quarter of the shortest renew
    /// interval or the epoch interval, whichever is shorter, between 100 ms
    /// and 250 ms. The upper bound is for the record outbox (F14): its first
    /// retry comes 50–100 ms after a failure, and a coarser tick would stretch
    /// every retry to it. Under `record: after_reply` the tick is
    /// [`AFTER_REPLY_TICK_MS`].
    pub fn tick_period(&self) -> Duration {
        if self
            .policies
            .iter()
            .any(|p| p.record == RecordWhen::AfterReply)
        {
            return Duration::from_millis(AFTER_REPLY_TICK_MS);
        }
        let shortest = self
            .policies
            .iter()
            .map(|p| p.renew_interval / 4)
            .chain(self.edge_cache_in_use().map(|c| c.epoch_interval()))
            .min()
            .unwrap_or(Duration::from_secs(1));
        shortest.clamp(
            Duration::from_millis(100),
            Duration::from_millis(MAX_TICK_MS),
        )
    }
}

/// The longest tick period: a call the outbox schedules goes out at most
/// this late.
const MAX_TICK_MS: u64 = 250;

/// The tick under `record: after_reply`: the outbox sends each answer's finalize
/// from the next tick, so a coarse one would hold records back from the retries
/// waiting on them, and send a worker's finalizes in bursts that a store's
/// `--max-concurrent-requests` sheds (`docs/stream-machine.md#recording-after-the-reply`).
pub const AFTER_REPLY_TICK_MS: u64 = 10;

/// What a hung renew's retry waits beyond the call timeouts: the renew and
/// its retry each go out on a tick (at most [`MAX_TICK_MS`] late), and the
/// retry waits the outbox's first backoff (at most
/// [`crate::outbox::BACKOFF_BASE_MS`]). `docs/record-outbox.md#renewal`.
pub const RENEW_RETRY_SLACK_MS: u64 = 2 * MAX_TICK_MS + crate::outbox::BACKOFF_BASE_MS;

/// One mebibyte.
const MIB: u64 = 1024 * 1024;

#[cfg(test)]
mod tests;
