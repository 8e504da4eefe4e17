//! The plugin configuration (F12): parsed once, in `on_configure`, into
//! validated types so the per-request path never re-checks a value.
//!
//! Two layers: `raw` mirrors the JSON exactly (serde, `deny_unknown_fields`,
//! every optional field an `Option` so a default is applied in one visible
//! place), and [`Config`] is what the state machine reads (durations, compiled
//! matchers, lowercase header sets). Every error names the field path
//! (`policies[0].lease_ms: …`) because it becomes the one log line an operator
//! sees when the plugin refuses to start.

mod policy;
mod raw;
mod validate;

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

pub use keyflight_protocol::problem::StatusProfile;
use keyflight_protocol::{PrincipalSource, ProblemCode, ScopeMode, Target};
use serde::Deserialize;

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

/// Default bytes of handed-off records one worker's outbox holds.
pub const DEFAULT_OUTBOX_MAX_BYTES: u64 = 16 * MIB;
/// Default time the outbox keeps resending a record (per policy).
pub const DEFAULT_RECORD_RETRY_BUDGET_MS: u64 = 120_000;
/// Default body limit of the lease-store (its `--max-body-bytes`).
pub const DEFAULT_STORE_MAX_BODY_BYTES: u64 = 8 * MIB;

/// The VM environment variable the lease-store token is read from when the configuration
/// names none (`lease_store.token_env`).
pub const DEFAULT_TOKEN_ENV: &str = "KEYFLIGHT_STORE_TOKEN";

/// Where the lease-store token came from, for the one line `on_configure` logs about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// The VM's environment: not in the plugin configuration, nor in `config_dump`'s copy.
    Environment,
    /// The VM's environment, and an inline `lease_store.token` ignored beside it.
    EnvironmentInlineIgnored,
    /// The deprecated inline `lease_store.token`, printed by every `config_dump`.
    Inline,
    /// None: callouts carry no bearer token.
    None,
}

impl LeaseStore {
    /// Settles the token once the VM environment's value of `token_env` is known: it wins
    /// over an inline token, which is deprecated (`docs/configuration.md#caller-identity`).
    pub fn take_token_from(&mut self, env: Option<String>) -> Result<TokenSource, ConfigError> {
        match (env, &self.token) {
            (Some(value), inline) => {
                if !is_token_text(&value) {
                    return Err(ConfigError::new(
                        "lease_store.token_env",
                        format!(
                            "the VM environment variable {} must be non-empty visible ASCII",
                            self.token_env
                        ),
                    ));
                }
                let source = match inline {
                    Some(_) => TokenSource::EnvironmentInlineIgnored,
                    None => TokenSource::Environment,
                };
                self.token = Some(value);
                Ok(source)
            }
            (None, Some(_)) => Ok(TokenSource::Inline),
            (None, None) => Ok(TokenSource::None),
        }
    }
}

/// A bearer token's text: non-empty visible ASCII.
fn is_token_text(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}

/// F14: the per-worker record outbox's bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outbox {
    /// Bytes of handed-off records one worker holds; a record that does not
    /// fit is recorded as not replayable instead.
    pub max_bytes: usize,
}

/// Default total bytes of the edge replay cache.
pub const DEFAULT_EDGE_CACHE_MAX_BYTES: u64 = 16 * MIB;
/// Default largest cached entry (encoded).
pub const DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES: u64 = 16 * 1024;
/// Default time an entry is served (never longer than a policy's retention).
pub const DEFAULT_EDGE_CACHE_TTL_S: u64 = 60;
/// Default bound on how long an edge may serve a record after an operator
/// erased or resolved it (F9).
pub const DEFAULT_EDGE_CACHE_MAX_STALENESS_MS: u64 = 3000;

/// F9: the edge replay cache's bounds, shared by every worker of the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeCache {
    /// Number of slots: `max_bytes / max_entry_bytes`, at most 65536.
    pub slots: u32,
    /// Largest encoded entry; a larger record is simply not cached.
    pub max_entry_bytes: usize,
    /// How long an entry is served; a policy's retention caps it further.
    pub ttl: Duration,
    /// How long after an operator's erase or resolve an entry may still be
    /// served: the worker asks the lease-store for its operator epoch every
    /// third of it, and serves nothing from the cache once its last answer is
    /// older than this.
    pub max_staleness: Duration,
}

impl EdgeCache {
    /// How often a worker asks the lease-store for its operator epoch.
    pub fn epoch_interval(&self) -> Duration {
        self.max_staleness / 3
    }
}

/// The lease-store callout settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStore {
    /// Envoy cluster for `dispatch_http_call`.
    pub cluster: String,
    /// `:authority` of callouts.
    pub authority: String,
    /// Bearer token for `/v1`: after [`LeaseStore::take_token_from`], the VM environment's
    /// (`token_env`) or, deprecated, the plugin configuration's; `None` sends none (the
    /// store authenticates the mesh identity), `docs/configuration.md#caller-identity`.
    pub token: Option<String>,
    /// The VM environment variable the token is read from.
    pub token_env: String,
    /// Per-call timeout (long-polls add the follower wait).
    pub timeout: Duration,
    /// The largest request body the lease-store accepts (its
    /// `--max-body-bytes`): a finalize carries the response base64-encoded.
    pub max_body_bytes: u64,
    /// Send the claims (finalizes) a worker's streams make in one event-loop turn as one
    /// batch (`docs/stream-machine.md#coalesced-calls`); on unless set to `false`.
    pub coalesce_calls: bool,
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

/// Which requests a policy guards (F0).
///
/// Matching errs on the side of guarding: a policy matches when any reading
/// of the request's path an upstream could route by matches
/// ([`Target::match_paths`]: as normalized, percent-decoded, dot segments
/// removed, slashes merged, `\` read as `/`), case-folded unless the policy
/// says [`PathCase::Sensitive`]; methods compare case-insensitively, and an
/// authority without a port matches its host on any port.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// Uppercase methods.
    pub methods: Vec<String>,
    /// Prefix of the path (the query is not matched), case-folded unless
    /// `path_case` is [`PathCase::Sensitive`].
    pub path_prefix: String,
    /// Optional regex over the path (use `^…$` to anchor); built
    /// case-insensitive unless `path_case` is [`PathCase::Sensitive`].
    pub path_regex: Option<regex_lite::Regex>,
    /// The authority; `None` matches any.
    pub authority: Option<AuthorityPattern>,
    /// Whether the path matches in every case.
    pub path_case: PathCase,
}

/// A policy's `match.authority`: a host, lower-case without a trailing dot,
/// and an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityPattern {
    /// The host.
    pub host: String,
    /// The port; `None` matches the host on any port.
    pub port: Option<u16>,
}

impl Matcher {
    /// Whether a request with this normalized target matches.
    pub fn matches(&self, target: &Target) -> bool {
        self.matches_read(target, Unreadable::default())
    }

    /// Whether a request matches whose target is `target` as far as it could
    /// be read: a part that was not UTF-8 matches any method or authority
    /// (`docs/identity.md#matching-policies`).
    pub fn matches_read(&self, target: &Target, unreadable: Unreadable) -> bool {
        if !unreadable.method
            && !self
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(&target.method))
        {
            return false;
        }
        let authority = &target.authority;
        if !unreadable.authority
            && let Some(pattern) = &self.authority
            && (pattern.host != authority.host()
                || pattern
                    .port
                    .is_some_and(|p| Some(p) != authority.effective_port()))
        {
            return false;
        }
        target.match_paths().iter().any(|path| {
            let path = match self.path_case {
                PathCase::Sensitive => path.clone(),
                PathCase::Insensitive => fold_case(path),
            };
            path.starts_with(&self.path_prefix)
                && self.path_regex.as_ref().is_none_or(|re| re.is_match(&path))
        })
    }
}

/// Which parts of a request's target were not UTF-8.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unreadable {
    /// `:method`.
    pub method: bool,
    /// `:authority`.
    pub authority: bool,
}

/// A path as every case-insensitive router compares it: upper-cased, then
/// lower-cased, so both `K` (KELVIN SIGN, lower-case `k`) and `ſ` (LONG S,
/// upper-case `S`) meet their ASCII letter, whichever way a router folds.
pub fn fold_case(path: &str) -> String {
    if path.is_ascii() {
        return path.to_ascii_lowercase();
    }
    path.to_uppercase().to_lowercase()
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
