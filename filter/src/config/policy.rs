//! Validating one policy: its matcher, its durations and caps, its header
//! lists (F0, F12, K4, F8; `docs/stream-machine.md#configuration`).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::authority::Authority;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::reconcile::DEFAULT_PATH;
use keyflight_protocol::{ProblemCode, ScopeMode};

use super::validate::{header_name, in_range, to_usize};
use super::{
    ALWAYS_RECORDED, AuthorityPattern, ConfigError, DEFAULT_FINGERPRINT_HEADERS, DEFAULT_METHODS,
    DEFAULT_RECORD_RETRY_BUDGET_MS, InProgress, MIB, Matcher, PathCase, Policy, PreviousRecipe,
    RENEW_RETRY_SLACK_MS, Reconcile, StatusProfile, Uncertain, fold_case, raw,
};
use crate::recorded_headers::{DEFAULT_REPLAY_HEADERS, never_stored};
use crate::status_matrix::{default_forget_statuses, may_be_forgotten};

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
    "idempotency-scope",
];

/// `store_timeout` is `lease_store.timeout_ms`: a renew may hang that long;
/// `profile` is the status profile, whose statuses a policy's own settings
/// default to.
pub(super) fn validate_policy(
    at: &str,
    p: raw::Policy,
    store_timeout: Duration,
    profile: StatusProfile,
) -> Result<Policy, ConfigError> {
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
    let renew_ms = renew_interval_ms(at, lease_ms, p.renew_interval_ms, millis(store_timeout))?;
    let in_progress = p.in_progress.unwrap_or_default();
    let follower_wait_ms = follower_wait_ms(at, p.follower_wait_ms, in_progress)?;
    let mismatch_status = mismatch_status(at, p.mismatch_status, profile)?;
    let retention_s = in_range(
        &format!("{at}.retention_s"),
        p.retention_s,
        86_400,
        1,
        10 * 365 * 86_400,
    )?;
    // The store refuses such claims too (`docs/records.md#retention-and-cleanup`).
    if retention_s.saturating_mul(1000) < lease_ms {
        return Err(ConfigError::new(
            format!("{at}.retention_s"),
            "must be at least lease_ms: a record that completes after its retention would \
             run again instead of replaying",
        ));
    }
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
    let scope = match p.scope {
        None | Some(raw::Scope::Route) => ScopeMode::Route,
        Some(raw::Scope::Service) => ScopeMode::Service,
    };
    let previous = match p.previous {
        None => None,
        Some(previous) => {
            let recipe = PreviousRecipe {
                scope: match previous.scope {
                    None => scope,
                    Some(raw::Scope::Route) => ScopeMode::Route,
                    Some(raw::Scope::Service) => ScopeMode::Service,
                },
            };
            if recipe.scope == scope {
                return Err(ConfigError::new(
                    format!("{at}.previous"),
                    "names the current recipe: a previous recipe must differ from it",
                ));
            }
            Some(recipe)
        }
    };
    let uncertain = p.uncertain.unwrap_or_default();
    let reconcile = reconcile(at, uncertain, p.reconcile)?;
    Ok(Policy {
        name: p.name,
        matcher,
        require_key: p.require_key.unwrap_or(false),
        scope,
        previous,
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
        uncertain,
        reconcile,
        server_errors: p.server_errors.unwrap_or_default(),
        record: p.record.unwrap_or_default(),
        mismatch_status,
        in_progress,
        router_retries: p.router_retries.unwrap_or_default(),
        edge_cache: p.edge_cache.unwrap_or(true),
        forget_statuses: forget_statuses(at, p.forget_statuses)?,
        record_retry_budget: Duration::from_millis(in_range(
            &format!("{at}.record_retry_budget_ms"),
            p.record_retry_budget_ms,
            DEFAULT_RECORD_RETRY_BUDGET_MS,
            1000,
            3_600_000,
        )?),
    })
}

/// The service's reconcile endpoint: named exactly when the policy reconciles
/// (`docs/reconcile.md#configuration`).
fn reconcile(
    at: &str,
    uncertain: Uncertain,
    raw: Option<raw::Reconcile>,
) -> Result<Option<Rc<Reconcile>>, ConfigError> {
    let at = format!("{at}.reconcile");
    let raw = match (uncertain, raw) {
        (Uncertain::Reconcile, Some(raw)) => raw,
        (Uncertain::Reconcile, None) => {
            return Err(ConfigError::new(
                at,
                "uncertain: reconcile needs the service's reconcile endpoint (cluster, path)",
            ));
        }
        (_, Some(_)) => {
            return Err(ConfigError::new(
                at,
                "is asked only under uncertain: reconcile; set that, or remove this block",
            ));
        }
        (_, None) => return Ok(None),
    };
    if raw.cluster.is_empty() {
        return Err(ConfigError::new(
            format!("{at}.cluster"),
            "must name the service's Envoy cluster",
        ));
    }
    let path = raw.path.unwrap_or_else(|| DEFAULT_PATH.to_owned());
    let plain_path = path.starts_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"?#%".contains(&b));
    if !plain_path {
        return Err(ConfigError::new(
            format!("{at}.path"),
            "must be an absolute path of visible ASCII without query, fragment or escapes",
        ));
    }
    let timeout_ms = in_range(&format!("{at}.timeout_ms"), raw.timeout_ms, 2000, 1, 60_000)?;
    let retry_after_s = in_range(
        &format!("{at}.retry_after_s"),
        raw.retry_after_s,
        1,
        1,
        3600,
    )?;
    Ok(Some(Rc::new(Reconcile {
        authority: raw.authority.unwrap_or_else(|| raw.cluster.clone()),
        cluster: raw.cluster,
        path,
        timeout: Duration::from_millis(timeout_ms),
        token_env: raw.token_env,
        retry_after_s,
    })))
}

/// The renew interval: at most half the lease, so one late or lost renewal
/// never lets it lapse, and short enough that a renew hanging for the whole
/// call timeout can time out and be retried, the retry again given a whole
/// timeout, before the lease runs out:
/// `renew_interval_ms + 2 × lease_store.timeout_ms + RENEW_RETRY_SLACK_MS ≤
/// lease_ms` (`docs/record-outbox.md#renewal`). The default is a third of the
/// lease, shortened to fit when the timeout asks for it.
fn renew_interval_ms(
    at: &str,
    lease_ms: u64,
    asked: Option<u64>,
    timeout_ms: u64,
) -> Result<u64, ConfigError> {
    let longest = lease_ms.saturating_sub(2 * timeout_ms + RENEW_RETRY_SLACK_MS);
    let renew_ms = in_range(
        &format!("{at}.renew_interval_ms"),
        asked,
        (lease_ms / 3).min(longest).max(100),
        100,
        lease_ms / 2,
    )?;
    if renew_ms > longest {
        return Err(ConfigError::new(
            format!("{at}.lease_ms"),
            format!(
                "must be at least renew_interval_ms + 2 × lease_store.timeout_ms + \
                 {RENEW_RETRY_SLACK_MS} ms ({renew_ms} + 2 × {timeout_ms} + \
                 {RENEW_RETRY_SLACK_MS} = {}), so a renew that hangs for the whole call \
                 timeout can be retried before the lease runs out; lengthen lease_ms or \
                 shorten renew_interval_ms or lease_store.timeout_ms",
                renew_ms + 2 * timeout_ms + RENEW_RETRY_SLACK_MS
            ),
        ));
    }
    Ok(renew_ms)
}

/// The follower's long-poll: none under `in_progress: conflict`, which
/// answers at once, so a wait asked for there is a contradiction
/// (`docs/stream-machine.md#the-claim`).
fn follower_wait_ms(
    at: &str,
    asked: Option<u64>,
    in_progress: InProgress,
) -> Result<u64, ConfigError> {
    let path = format!("{at}.follower_wait_ms");
    match in_progress {
        InProgress::Wait => in_range(&path, asked, 5000, 0, 60_000),
        InProgress::Conflict if asked.unwrap_or(0) == 0 => Ok(0),
        InProgress::Conflict => Err(ConfigError::new(
            path,
            "must be 0 or absent under in_progress: conflict, which answers at once",
        )),
    }
}

/// `mismatch_status`: 409 or 422; absent, what the status profile gives
/// `idempotency_conflict` (F3, F10).
fn mismatch_status(
    at: &str,
    asked: Option<u16>,
    profile: StatusProfile,
) -> Result<u16, ConfigError> {
    match asked {
        None => Ok(ProblemCode::IdempotencyConflict.status_under(profile)),
        Some(status @ (409 | 422)) => Ok(status),
        Some(status) => Err(ConfigError::new(
            format!("{at}.mismatch_status"),
            format!("{status} is neither 409 nor 422"),
        )),
    }
}

/// `forget_statuses`: 3xx and 4xx answers that are not cooldown failures,
/// no duplicates; absent, the status matrix's default (F6).
fn forget_statuses(at: &str, list: Option<Vec<u16>>) -> Result<BTreeSet<u16>, ConfigError> {
    let Some(list) = list else {
        return Ok(default_forget_statuses());
    };
    let mut out = BTreeSet::new();
    for (j, status) in list.into_iter().enumerate() {
        let path = format!("{at}.forget_statuses[{j}]");
        if !may_be_forgotten(status) {
            return Err(ConfigError::new(
                path,
                format!(
                    "{status} cannot be forgotten: only a 3xx or a 4xx other than 408 and 429 \
                     (a 2xx is a completed operation, 408, 429 and 5xx cool down)"
                ),
            ));
        }
        if !out.insert(status) {
            return Err(ConfigError::new(path, format!("duplicate status {status}")));
        }
    }
    Ok(out)
}

fn validate_match(at: &str, m: Option<raw::Match>) -> Result<Matcher, ConfigError> {
    let m = m.unwrap_or(raw::Match {
        methods: None,
        path_prefix: None,
        path_regex: None,
        authority: None,
        path_case: None,
    });
    let path_case = m.path_case.unwrap_or_default();
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
    let path_prefix = match path_case {
        PathCase::Sensitive => path_prefix,
        PathCase::Insensitive => fold_case(&path_prefix),
    };
    let path_regex = match m.path_regex {
        None => None,
        Some(re) => Some(
            regex_lite::RegexBuilder::new(&re)
                .case_insensitive(path_case == PathCase::Insensitive)
                .build()
                .map_err(|e| {
                    ConfigError::new(format!("{at}.path_regex"), format!("invalid regex: {e}"))
                })?,
        ),
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
        path_case,
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
