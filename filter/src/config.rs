//! The plugin configuration (F12): parsed once, in `on_configure`, into
//! validated types so the per-request path never re-checks a value.
//!
//! Two layers: `raw` mirrors the JSON exactly (serde, `deny_unknown_fields`,
//! every optional field an `Option` so a default is applied in one visible
//! place), and [`Config`] is what the state machine reads (durations, compiled
//! matchers, lowercase header sets). Every error names the field path
//! (`policies[0].lease_ms: …`) because it becomes the one log line an operator
//! sees when the plugin refuses to start.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::authority::Authority;
pub use keyflight_protocol::problem::StatusProfile;
use keyflight_protocol::wire::base64_len;
use keyflight_protocol::{PrincipalSource, ScopeMode, Target};
use serde::Deserialize;

use crate::replay::{DEFAULT_REPLAY_HEADERS, never_stored};

/// Default key header (K1).
pub const DEFAULT_KEY_HEADER: &str = "idempotency-key";
/// Default methods a policy matches.
pub const DEFAULT_METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];
/// Default fingerprint headers (K4): one list, shared with `lease-store fingerprint`.
pub use keyflight_protocol::fingerprint::DEFAULT_FINGERPRINT_HEADERS;

/// Headers that describe the transport, not the operation: they differ between
/// a request and its retry, so they may never enter a fingerprint (K4).
const TRANSPORT_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-request-id",
    "traceparent",
    "tracestate",
    "baggage",
    "b3",
    "x-b3-traceid",
    "x-b3-spanid",
    "x-b3-parentspanid",
    "x-b3-sampled",
    "x-b3-flags",
    "x-cloud-trace-context",
    "x-amzn-trace-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-client-cert",
    "forwarded",
    "x-real-ip",
    "user-agent",
    "date",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "via",
    "idempotency-fence",
];

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Uncertain {
    /// Record `failed` with the cooldown; a same-body retry may run again (default).
    #[default]
    Retry,
    /// Record `unknown`: an operator decides (seed 004).
    Hold,
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
/// Upper bound on the number of slots (shared-data keys) the cache uses.
const MAX_EDGE_CACHE_SLOTS: u64 = 65_536;

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
    /// Bearer token for `/v1`.
    pub token: String,
    /// Per-call timeout (long-polls add the follower wait).
    pub timeout: Duration,
    /// The largest request body the lease-store accepts (its
    /// `--max-body-bytes`): a finalize carries the response base64-encoded.
    pub max_body_bytes: u64,
}

/// Where the effective principal comes from (K2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// On-behalf-of sources, tried first, in order.
    pub actor: Vec<Rc<PrincipalSource>>,
    /// Caller sources, tried in order when no actor is present.
    pub principal: Vec<Rc<PrincipalSource>>,
}

/// Which requests a policy guards (F0).
///
/// Matching errs on the side of guarding: a policy matches when any reading
/// of the request's path an upstream could route by matches
/// ([`Target::match_paths`]: as normalized, percent-decoded, dot segments
/// removed, slashes merged), methods compare case-insensitively, and an
/// authority without a port matches its host on any port.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// Uppercase methods.
    pub methods: Vec<String>,
    /// Prefix of the path (the query is not matched).
    pub path_prefix: String,
    /// Optional regex over the path (use `^…$` to anchor).
    pub path_regex: Option<regex_lite::Regex>,
    /// The authority; `None` matches any.
    pub authority: Option<AuthorityPattern>,
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
        if !self
            .methods
            .iter()
            .any(|m| m.eq_ignore_ascii_case(&target.method))
        {
            return false;
        }
        let authority = &target.authority;
        if let Some(pattern) = &self.authority
            && (pattern.host != authority.host()
                || pattern
                    .port
                    .is_some_and(|p| Some(p) != authority.effective_port()))
        {
            return false;
        }
        target.match_paths().iter().any(|path| {
            path.starts_with(&self.path_prefix)
                && self.path_regex.as_ref().is_none_or(|re| re.is_match(path))
        })
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
    /// What Envoy's router may retry (F15).
    pub router_retries: RouterRetries,
    /// Whether this policy's records use the edge replay cache (F9).
    pub edge_cache: bool,
    /// How long the outbox keeps resending a record it took over (F14).
    pub record_retry_budget: Duration,
}

impl Config {
    /// The first policy matching the request.
    pub fn match_policy(&self, target: &Target) -> Option<&Rc<Policy>> {
        self.policies.iter().find(|p| p.matcher.matches(target))
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
    /// every retry to it.
    pub fn tick_period(&self) -> Duration {
        let shortest = self
            .policies
            .iter()
            .map(|p| p.renew_interval / 4)
            .chain(self.edge_cache_in_use().map(|c| c.epoch_interval()))
            .min()
            .unwrap_or(Duration::from_secs(1));
        shortest.clamp(Duration::from_millis(100), Duration::from_millis(250))
    }
}

/// Parses and validates the plugin configuration JSON.
pub fn parse_plugin_config(json: &[u8]) -> Result<Config, ConfigError> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let raw: raw::Config = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            "configuration".to_owned()
        } else {
            path
        };
        ConfigError::new(path, e.into_inner().to_string())
    })?;
    de.end()
        .map_err(|e| ConfigError::new("configuration", e.to_string()))?;
    validate(raw)
}

/// The JSON shape, field for field.
mod raw {
    use serde::Deserialize;

    use super::{Anonymous, FailureMode, Mode, RouterRetries, StatusProfile, Uncertain};

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Config {
        pub lease_store: LeaseStore,
        pub key_header: Option<String>,
        pub mode: Option<Mode>,
        pub status_profile: Option<StatusProfile>,
        pub identity: Option<Identity>,
        pub policies: Vec<Policy>,
        pub edge_cache: Option<EdgeCache>,
        pub outbox: Option<Outbox>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Outbox {
        pub max_bytes: Option<u64>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct EdgeCache {
        pub max_bytes: Option<u64>,
        pub max_entry_bytes: Option<u64>,
        pub ttl_s: Option<u64>,
        pub max_staleness_ms: Option<u64>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct LeaseStore {
        pub cluster: String,
        pub authority: Option<String>,
        pub token: String,
        pub timeout_ms: Option<u64>,
        pub max_body_bytes: Option<u64>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Identity {
        pub actor: Option<Vec<Source>>,
        pub principal: Option<Vec<Source>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "snake_case")]
    pub enum Source {
        Header(String),
        Property(Vec<String>),
        JwtClaim(JwtClaim),
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct JwtClaim {
        pub metadata_key: String,
        pub claim: String,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Match {
        pub methods: Option<Vec<String>>,
        pub path_prefix: Option<String>,
        pub path_regex: Option<String>,
        pub authority: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Policy {
        pub name: String,
        #[serde(rename = "match")]
        pub matcher: Option<Match>,
        pub require_key: Option<bool>,
        pub scope: Option<Scope>,
        pub anonymous: Option<Anonymous>,
        pub lease_ms: Option<u64>,
        pub renew_interval_ms: Option<u64>,
        pub follower_wait_ms: Option<u64>,
        pub retention_s: Option<u64>,
        pub failure_cooldown_ms: Option<u64>,
        pub max_request_body_bytes: Option<u64>,
        pub max_cacheable_response_bytes: Option<u64>,
        pub replay_headers: Option<Vec<String>>,
        pub fingerprint_headers: Option<Vec<String>>,
        pub failure_mode: Option<FailureMode>,
        pub uncertain: Option<Uncertain>,
        pub router_retries: Option<RouterRetries>,
        pub edge_cache: Option<bool>,
        pub record_retry_budget_ms: Option<u64>,
    }

    #[derive(Deserialize, Clone, Copy)]
    #[serde(rename_all = "snake_case")]
    pub enum Scope {
        Route,
        Service,
    }
}

const MIB: u64 = 1024 * 1024;

fn validate(raw: raw::Config) -> Result<Config, ConfigError> {
    let lease_store = validate_lease_store(raw.lease_store)?;
    let key_header = header_name(
        "key_header",
        raw.key_header.as_deref().unwrap_or(DEFAULT_KEY_HEADER),
    )?;
    let identity = match raw.identity {
        None => Identity::default(),
        Some(id) => Identity {
            actor: sources("identity.actor", id.actor.unwrap_or_default())?,
            principal: sources("identity.principal", id.principal.unwrap_or_default())?,
        },
    };
    if raw.policies.is_empty() {
        return Err(ConfigError::new(
            "policies",
            "must list at least one policy",
        ));
    }
    let mut names = BTreeSet::new();
    let mut policies = Vec::with_capacity(raw.policies.len());
    for (i, p) in raw.policies.into_iter().enumerate() {
        let at = format!("policies[{i}]");
        if !names.insert(p.name.clone()) {
            return Err(ConfigError::new(
                format!("{at}.name"),
                format!("duplicate policy name {:?}", p.name),
            ));
        }
        let policy = validate_policy(&at, p)?;
        check_record_fits(&at, &policy, &lease_store)?;
        policies.push(Rc::new(policy));
    }
    Ok(Config {
        lease_store,
        key_header,
        mode: raw.mode.unwrap_or_default(),
        status_profile: raw.status_profile.unwrap_or_default(),
        identity,
        policies,
        edge_cache: validate_edge_cache(raw.edge_cache)?,
        outbox: validate_outbox(raw.outbox)?,
    })
}

/// The finalize of a policy's largest recordable response must fit the
/// lease-store's body limit: the body travels base64-encoded (4/3 of its
/// size) inside a JSON document. A policy whose largest record the store
/// would refuse with 413 is a configuration that cannot work; refuse it here
/// rather than record those answers as not replayable one by one.
fn check_record_fits(at: &str, policy: &Policy, store: &LeaseStore) -> Result<(), ConfigError> {
    let needed = finalize_bytes(policy.max_cacheable_response_bytes as u64);
    if needed > store.max_body_bytes {
        return Err(ConfigError::new(
            format!("{at}.max_cacheable_response_bytes"),
            format!(
                "a {} byte response needs a {needed} byte finalize, over \
                 lease_store.max_body_bytes ({}); lower the cap or raise the \
                 lease-store's --max-body-bytes and lease_store.max_body_bytes together",
                policy.max_cacheable_response_bytes, store.max_body_bytes
            ),
        ));
    }
    Ok(())
}

/// The size of a finalize carrying a `body` byte response: base64 plus room
/// for the JSON framing and the recorded headers (64 KiB).
pub fn finalize_bytes(body: u64) -> u64 {
    base64_len(body) + 64 * 1024
}

fn validate_outbox(raw: Option<raw::Outbox>) -> Result<Outbox, ConfigError> {
    let max_bytes = in_range(
        "outbox.max_bytes",
        raw.and_then(|o| o.max_bytes),
        DEFAULT_OUTBOX_MAX_BYTES,
        64 * 1024,
        1024 * MIB,
    )?;
    Ok(Outbox {
        max_bytes: to_usize(max_bytes),
    })
}

/// `max_bytes: 0` turns the cache off.
fn validate_edge_cache(raw: Option<raw::EdgeCache>) -> Result<Option<EdgeCache>, ConfigError> {
    let raw = raw.unwrap_or(raw::EdgeCache {
        max_bytes: None,
        max_entry_bytes: None,
        ttl_s: None,
        max_staleness_ms: None,
    });
    let max_entry_bytes = in_range(
        "edge_cache.max_entry_bytes",
        raw.max_entry_bytes,
        DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES,
        1024,
        64 * MIB,
    )?;
    let ttl_s = in_range(
        "edge_cache.ttl_s",
        raw.ttl_s,
        DEFAULT_EDGE_CACHE_TTL_S,
        1,
        86_400,
    )?;
    let max_staleness_ms = in_range(
        "edge_cache.max_staleness_ms",
        raw.max_staleness_ms,
        DEFAULT_EDGE_CACHE_MAX_STALENESS_MS,
        300,
        60_000,
    )?;
    let max_bytes = raw.max_bytes.unwrap_or(DEFAULT_EDGE_CACHE_MAX_BYTES);
    if max_bytes == 0 {
        return Ok(None);
    }
    let max_bytes = in_range(
        "edge_cache.max_bytes",
        Some(max_bytes),
        0,
        max_entry_bytes,
        1024 * MIB,
    )?;
    let slots = (max_bytes / max_entry_bytes).min(MAX_EDGE_CACHE_SLOTS);
    Ok(Some(EdgeCache {
        slots: u32::try_from(slots).unwrap_or(u32::MAX),
        max_entry_bytes: to_usize(max_entry_bytes),
        ttl: Duration::from_secs(ttl_s),
        max_staleness: Duration::from_millis(max_staleness_ms),
    }))
}

fn validate_lease_store(raw: raw::LeaseStore) -> Result<LeaseStore, ConfigError> {
    if raw.cluster.trim().is_empty() {
        return Err(ConfigError::new(
            "lease_store.cluster",
            "must name an Envoy cluster",
        ));
    }
    let authority = raw.authority.unwrap_or_else(|| raw.cluster.clone());
    if authority.is_empty() || !authority.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::new(
            "lease_store.authority",
            "must be a non-empty host[:port]",
        ));
    }
    if raw.token.is_empty() || !raw.token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::new(
            "lease_store.token",
            "must be non-empty visible ASCII",
        ));
    }
    let timeout_ms = in_range("lease_store.timeout_ms", raw.timeout_ms, 1000, 1, 60_000)?;
    let max_body_bytes = in_range(
        "lease_store.max_body_bytes",
        raw.max_body_bytes,
        DEFAULT_STORE_MAX_BODY_BYTES,
        64 * 1024,
        1024 * MIB,
    )?;
    Ok(LeaseStore {
        cluster: raw.cluster,
        authority,
        token: raw.token,
        timeout: Duration::from_millis(timeout_ms),
        max_body_bytes,
    })
}

fn validate_policy(at: &str, p: raw::Policy) -> Result<Policy, ConfigError> {
    if p.name.trim().is_empty() {
        return Err(ConfigError::new(format!("{at}.name"), "must not be empty"));
    }
    let matcher = validate_match(&format!("{at}.match"), p.matcher)?;
    let lease_ms = in_range(
        &format!("{at}.lease_ms"),
        p.lease_ms,
        30_000,
        1000,
        3_600_000,
    )?;
    // At most half the lease, so one late or lost renewal never lets it lapse.
    let renew_ms = in_range(
        &format!("{at}.renew_interval_ms"),
        p.renew_interval_ms,
        lease_ms / 3,
        100,
        lease_ms / 2,
    )?;
    let follower_wait_ms = in_range(
        &format!("{at}.follower_wait_ms"),
        p.follower_wait_ms,
        5000,
        0,
        60_000,
    )?;
    let retention_s = in_range(
        &format!("{at}.retention_s"),
        p.retention_s,
        86_400,
        1,
        10 * 365 * 86_400,
    )?;
    let cooldown_ms = in_range(
        &format!("{at}.failure_cooldown_ms"),
        p.failure_cooldown_ms,
        2000,
        0,
        86_400_000,
    )?;
    let max_request = in_range(
        &format!("{at}.max_request_body_bytes"),
        p.max_request_body_bytes,
        MIB,
        0,
        64 * MIB,
    )?;
    let max_response = in_range(
        &format!("{at}.max_cacheable_response_bytes"),
        p.max_cacheable_response_bytes,
        2 * MIB,
        0,
        64 * MIB,
    )?;
    let mut replay_headers: BTreeSet<String> = DEFAULT_REPLAY_HEADERS
        .iter()
        .chain(&ALWAYS_RECORDED)
        .map(|h| (*h).to_owned())
        .collect();
    for (j, h) in p.replay_headers.unwrap_or_default().iter().enumerate() {
        let path = format!("{at}.replay_headers[{j}]");
        let name = header_name(&path, h)?;
        if never_stored(&name) {
            return Err(ConfigError::new(
                path,
                format!("{name:?} is never stored or replayed (F8)"),
            ));
        }
        replay_headers.insert(name);
    }
    let fingerprint_headers = match p.fingerprint_headers {
        None => DEFAULT_FINGERPRINT_HEADERS
            .iter()
            .map(|h| (*h).to_owned())
            .collect(),
        Some(list) => {
            let mut out: Vec<String> = Vec::with_capacity(list.len());
            for (j, h) in list.iter().enumerate() {
                let path = format!("{at}.fingerprint_headers[{j}]");
                let name = header_name(&path, h)?;
                if TRANSPORT_HEADERS.contains(&name.as_str()) {
                    return Err(ConfigError::new(
                        path,
                        format!("{name:?} is a transport header and never part of a fingerprint"),
                    ));
                }
                if out.contains(&name) {
                    return Err(ConfigError::new(path, format!("duplicate header {name:?}")));
                }
                out.push(name);
            }
            out
        }
    };
    Ok(Policy {
        name: p.name,
        matcher,
        require_key: p.require_key.unwrap_or(false),
        scope: match p.scope {
            None | Some(raw::Scope::Route) => ScopeMode::Route,
            Some(raw::Scope::Service) => ScopeMode::Service,
        },
        anonymous: p.anonymous.unwrap_or_default(),
        lease: Duration::from_millis(lease_ms),
        renew_interval: Duration::from_millis(renew_ms),
        follower_wait: Duration::from_millis(follower_wait_ms),
        retention: Duration::from_secs(retention_s),
        failure_cooldown: Duration::from_millis(cooldown_ms),
        max_request_body_bytes: to_usize(max_request),
        max_cacheable_response_bytes: to_usize(max_response),
        replay_headers,
        fingerprint_headers,
        failure_mode: p.failure_mode.unwrap_or_default(),
        uncertain: p.uncertain.unwrap_or_default(),
        router_retries: p.router_retries.unwrap_or_default(),
        edge_cache: p.edge_cache.unwrap_or(true),
        record_retry_budget: Duration::from_millis(in_range(
            &format!("{at}.record_retry_budget_ms"),
            p.record_retry_budget_ms,
            DEFAULT_RECORD_RETRY_BUDGET_MS,
            1000,
            3_600_000,
        )?),
    })
}

fn validate_match(at: &str, m: Option<raw::Match>) -> Result<Matcher, ConfigError> {
    let m = m.unwrap_or(raw::Match {
        methods: None,
        path_prefix: None,
        path_regex: None,
        authority: None,
    });
    let methods = match m.methods {
        None => DEFAULT_METHODS.iter().map(|m| (*m).to_owned()).collect(),
        Some(list) if list.is_empty() => {
            return Err(ConfigError::new(
                format!("{at}.methods"),
                "must list at least one method",
            ));
        }
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for (j, method) in list.iter().enumerate() {
                if !keyflight_protocol::headers::is_token(method) {
                    return Err(ConfigError::new(
                        format!("{at}.methods[{j}]"),
                        format!("{method:?} is not an HTTP method token"),
                    ));
                }
                out.push(method.to_ascii_uppercase());
            }
            out
        }
    };
    let path_prefix = m.path_prefix.unwrap_or_else(|| "/".to_owned());
    if !path_prefix.starts_with('/') {
        return Err(ConfigError::new(
            format!("{at}.path_prefix"),
            "must start with '/'",
        ));
    }
    if path_prefix.contains('?') {
        return Err(ConfigError::new(
            format!("{at}.path_prefix"),
            "must be a path: the query is not matched",
        ));
    }
    let path_regex = match m.path_regex {
        None => None,
        Some(re) => Some(regex_lite::Regex::new(&re).map_err(|e| {
            ConfigError::new(format!("{at}.path_regex"), format!("invalid regex: {e}"))
        })?),
    };
    let authority = match m.authority {
        None => None,
        Some(a) => Some(authority_pattern(&format!("{at}.authority"), &a)?),
    };
    Ok(Matcher {
        methods,
        path_prefix,
        path_regex,
        authority,
    })
}

/// `host` or `host:port`, normalized like a request's authority (lower-case,
/// no trailing dot; a port without a scheme, so it is kept as written).
fn authority_pattern(path: &str, text: &str) -> Result<AuthorityPattern, ConfigError> {
    let invalid = || ConfigError::new(path, "must be a non-empty host[:port]");
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid());
    }
    let authority = Authority::new(text, None);
    let host = authority.host().to_owned();
    // A well-formed host has no colon outside an IPv6 literal's brackets.
    if host.is_empty() || (!host.starts_with('[') && host.contains(':')) {
        return Err(invalid());
    }
    Ok(AuthorityPattern {
        host,
        port: authority.effective_port(),
    })
}

fn sources(at: &str, list: Vec<raw::Source>) -> Result<Vec<Rc<PrincipalSource>>, ConfigError> {
    list.into_iter()
        .enumerate()
        .map(|(i, s)| match s {
            raw::Source::Header(h) => Ok(PrincipalSource::Header(header_name(
                &format!("{at}[{i}].header"),
                &h,
            )?)),
            raw::Source::Property(path) => {
                if path.is_empty() || path.iter().any(String::is_empty) {
                    return Err(ConfigError::new(
                        format!("{at}[{i}].property"),
                        "must be a non-empty list of non-empty path segments",
                    ));
                }
                Ok(PrincipalSource::Property(path))
            }
            raw::Source::JwtClaim(c) => {
                if c.metadata_key.is_empty() {
                    return Err(ConfigError::new(
                        format!("{at}[{i}].jwt_claim.metadata_key"),
                        "must not be empty",
                    ));
                }
                PrincipalSource::jwt_claim(&c.metadata_key, &c.claim).map_err(|e| {
                    ConfigError::new(format!("{at}[{i}].jwt_claim.claim"), e.to_string())
                })
            }
        })
        .map(|source| source.map(Rc::new))
        .collect()
}

/// A header name: an RFC 9110 token, returned lowercase.
fn header_name(path: &str, name: &str) -> Result<String, ConfigError> {
    if !keyflight_protocol::headers::is_token(name) {
        return Err(ConfigError::new(
            path,
            format!("{name:?} is not a valid header name"),
        ));
    }
    Ok(name.to_ascii_lowercase())
}

fn in_range(
    path: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(ConfigError::new(
            path,
            format!("must be between {min} and {max}"),
        ));
    }
    Ok(v)
}

/// Caps are at most 64 MiB, so this never saturates on 32-bit wasm.
fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests;
