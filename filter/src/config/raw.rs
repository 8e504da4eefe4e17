//! The plugin configuration's JSON shape, field for field
//! (`docs/stream-machine.md#configuration`).
//!
//! Every struct denies unknown fields and every optional field is an
//! `Option`, so a default is applied in one visible place (`validate.rs`)
//! and a misspelt field is an error naming it, never silently ignored.

use serde::Deserialize;

use super::{
    Anonymous, Delegation, FailureMode, InProgress, Mode, PathCase, RecordWhen, RouterRetries,
    ServerErrors, StatusProfile, Uncertain,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Config {
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
pub(super) struct Outbox {
    pub max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EdgeCache {
    pub max_bytes: Option<u64>,
    pub max_entry_bytes: Option<u64>,
    pub ttl_s: Option<u64>,
    pub max_staleness_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaseStore {
    pub cluster: String,
    pub authority: Option<String>,
    pub token: Option<String>,
    pub token_env: Option<String>,
    pub timeout_ms: Option<u64>,
    pub max_body_bytes: Option<u64>,
    pub coalesce_calls: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Identity {
    pub actor: Option<Vec<Source>>,
    pub principal: Option<Vec<Source>>,
    pub delegation: Option<Delegation>,
    pub not_principals: Option<Vec<String>>,
    pub previous: Option<PreviousIdentity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviousIdentity {
    pub actor: Option<Vec<Source>>,
    pub principal: Option<Vec<Source>>,
    pub delegation: Option<Delegation>,
    pub not_principals: Option<Vec<String>>,
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
pub(super) struct JwtClaim {
    pub metadata_key: String,
    pub claim: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Match {
    pub methods: Option<Vec<String>>,
    pub path_prefix: Option<String>,
    pub path_regex: Option<String>,
    pub authority: Option<String>,
    pub path_case: Option<PathCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Policy {
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
    pub server_errors: Option<ServerErrors>,
    pub record: Option<RecordWhen>,
    pub mismatch_status: Option<u16>,
    pub in_progress: Option<InProgress>,
    pub router_retries: Option<RouterRetries>,
    pub edge_cache: Option<bool>,
    pub record_retry_budget_ms: Option<u64>,
    pub forget_statuses: Option<Vec<u16>>,
    pub previous: Option<Previous>,
    pub reconcile: Option<Reconcile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Reconcile {
    pub cluster: String,
    pub authority: Option<String>,
    pub path: Option<String>,
    pub timeout_ms: Option<u64>,
    pub token_env: Option<String>,
    pub retry_after_s: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Previous {
    pub scope: Option<Scope>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Route,
    Service,
}
