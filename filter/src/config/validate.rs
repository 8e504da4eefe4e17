//! Validation: the JSON shape ([`super::raw`]) becomes the [`Config`] the
//! machine reads, every default applied here and every error naming its
//! field path (`docs/stream-machine.md#configuration`).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::PrincipalSource;
use keyflight_protocol::wire::base64_len;

use super::is_token_text;
use super::policy::validate_policy;
use super::{
    Config, ConfigError, DEFAULT_EDGE_CACHE_MAX_BYTES, DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES,
    DEFAULT_EDGE_CACHE_MAX_STALENESS_MS, DEFAULT_EDGE_CACHE_TTL_S, DEFAULT_KEY_HEADER,
    DEFAULT_OUTBOX_MAX_BYTES, DEFAULT_STORE_MAX_BODY_BYTES, DEFAULT_TOKEN_ENV, Delegation,
    EdgeCache, Identity, LeaseStore, MIB, Outbox, Policy, raw,
};

/// Upper bound on the number of slots (shared-data keys) the cache uses.
const MAX_EDGE_CACHE_SLOTS: u64 = 65_536;

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

/// `<at>.not_principals`: names as a source reads them (trimmed, so never
/// blank).
fn not_principals(at: &str, names: Vec<String>) -> Result<BTreeSet<String>, ConfigError> {
    let mut out = BTreeSet::new();
    for (j, name) in names.into_iter().enumerate() {
        if name.trim().is_empty() || name.trim() != name {
            return Err(ConfigError::new(
                format!("{at}.not_principals[{j}]"),
                "must be a principal name, not blank and without surrounding spaces",
            ));
        }
        out.insert(name);
    }
    Ok(out)
}

/// One set of principal sources at `at` (`identity` or `identity.previous`).
fn identity_sources(
    at: &str,
    actor: Option<Vec<raw::Source>>,
    principal: Option<Vec<raw::Source>>,
    delegation: Option<Delegation>,
    names: Option<Vec<String>>,
) -> Result<Identity, ConfigError> {
    let identity = Identity {
        actor: sources(&format!("{at}.actor"), actor.unwrap_or_default())?,
        principal: sources(&format!("{at}.principal"), principal.unwrap_or_default())?,
        delegation: delegation.unwrap_or_default(),
        not_principals: not_principals(at, names.unwrap_or_default())?,
        previous: None,
    };
    // The default pairs whatever is there; asked for by name, the pair needs both lists.
    if delegation == Some(Delegation::SubjectAndActor)
        && (identity.actor.is_empty() || identity.principal.is_empty())
    {
        return Err(ConfigError::new(
            format!("{at}.delegation"),
            format!(
                "subject_and_actor pairs a subject with an actor: it needs both {at}.actor and \
                 {at}.principal sources"
            ),
        ));
    }
    Ok(identity)
}

/// Which parties of a request that carries both a subject and an actor enter its principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parties {
    subject: bool,
    actor: bool,
}

impl Parties {
    fn of(identity: &Identity) -> Self {
        let actor = !identity.actor.is_empty();
        Parties {
            actor,
            subject: !identity.principal.is_empty()
                && (!actor || identity.delegation == Delegation::SubjectAndActor),
        }
    }

    fn describe(self) -> &'static str {
        match (self.subject, self.actor) {
            (true, true) => "the subject and the actor",
            (true, false) => "the subject alone",
            (false, true) => "the actor alone",
            (false, false) => "no party",
        }
    }
}

/// A claim also holds the request's scope under `identity.previous`, and the store answers
/// from either record, so a previous recipe that gives two callers one scope where the
/// current one tells them apart replays one caller's answer to the other: it may only be as
/// fine as the current recipe or finer (`docs/identity.md#previous-recipes`).
fn refuse_broader(previous: &Identity, current: &Identity) -> Result<(), ConfigError> {
    let (before, now) = (Parties::of(previous), Parties::of(current));
    if (now.subject && !before.subject) || (now.actor && !before.actor) {
        return Err(ConfigError::new(
            "identity.previous",
            format!(
                "is broader than identity: it scopes a request carrying a subject and an actor \
                 by {}, not by {}, so every claim would also claim a scope callers share and \
                 could be answered with another caller's record",
                before.describe(),
                now.describe()
            ),
        ));
    }
    if let Some(name) = current
        .not_principals
        .difference(&previous.not_principals)
        .next()
    {
        return Err(ConfigError::new(
            "identity.previous.not_principals",
            format!(
                "is broader than identity: it omits {name:?}, which identity.not_principals \
                 lists, so under it that name is the principal of every caller behind it and \
                 every claim would also claim their one shared scope"
            ),
        ));
    }
    Ok(())
}

fn validate(raw: raw::Config) -> Result<Config, ConfigError> {
    let lease_store = validate_lease_store(raw.lease_store)?;
    let key_header = header_name(
        "key_header",
        raw.key_header.as_deref().unwrap_or(DEFAULT_KEY_HEADER),
    )?;
    let identity = match raw.identity {
        None => Identity::default(),
        Some(id) => {
            let previous = match id.previous {
                None => None,
                Some(previous) => Some(Box::new(identity_sources(
                    "identity.previous",
                    previous.actor,
                    previous.principal,
                    previous.delegation,
                    previous.not_principals,
                )?)),
            };
            let identity = Identity {
                previous,
                ..identity_sources(
                    "identity",
                    id.actor,
                    id.principal,
                    id.delegation,
                    id.not_principals,
                )?
            };
            if identity
                .previous
                .as_deref()
                .is_some_and(|previous| previous.same_sources(&identity))
            {
                return Err(ConfigError::new(
                    "identity.previous",
                    "names the current sources: a previous recipe must differ from it",
                ));
            }
            if let Some(previous) = identity.previous.as_deref() {
                refuse_broader(previous, &identity)?;
            }
            identity
        }
    };
    if raw.policies.is_empty() {
        return Err(ConfigError::new(
            "policies",
            "must list at least one policy",
        ));
    }
    let status_profile = raw.status_profile.unwrap_or_default();
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
        let policy = validate_policy(&at, p, lease_store.timeout, status_profile)?;
        check_record_fits(&at, &policy, &lease_store)?;
        policies.push(Rc::new(policy));
    }
    Ok(Config {
        lease_store,
        key_header,
        mode: raw.mode.unwrap_or_default(),
        status_profile,
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
    if let Some(token) = &raw.token
        && !is_token_text(token)
    {
        return Err(ConfigError::new(
            "lease_store.token",
            "must be non-empty visible ASCII",
        ));
    }
    let token_env = raw
        .token_env
        .unwrap_or_else(|| DEFAULT_TOKEN_ENV.to_owned());
    if token_env.is_empty() || !token_env.bytes().all(|b| b.is_ascii_graphic() && b != b'=') {
        return Err(ConfigError::new(
            "lease_store.token_env",
            "must name an environment variable (visible ASCII, no `=`)",
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
        token_env,
        timeout: Duration::from_millis(timeout_ms),
        max_body_bytes,
        coalesce_calls: raw.coalesce_calls.unwrap_or(true),
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
pub(super) fn header_name(path: &str, name: &str) -> Result<String, ConfigError> {
    if !keyflight_protocol::headers::is_token(name) {
        return Err(ConfigError::new(
            path,
            format!("{name:?} is not a valid header name"),
        ));
    }
    Ok(name.to_ascii_lowercase())
}

pub(super) fn in_range(
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
pub(super) fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}
