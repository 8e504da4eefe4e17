//! Configuration parsing and validation: defaults, and one error per invalid field.

use super::*;

/// The contract's example configuration (plugin-config.md), comments removed.
pub(crate) const EXAMPLE: &str = r#"{
  "lease_store": {
    "cluster": "keyflight_lease_store",
    "authority": "lease-store",
    "token": "filter-secret",
    "timeout_ms": 1000
  },
  "key_header": "idempotency-key",
  "mode": "enforce",
  "status_profile": "keyflight",
  "identity": {
    "actor":     [ {"header": "x-actor"} ],
    "principal": [ {"header": "x-user"}, {"property": ["connection","uri_san_peer_certificate"]}, {"jwt_claim": {"metadata_key": "jwt_payload", "claim": "sub"}} ]
  },
  "policies": [
    {
      "name": "payments",
      "match": { "methods": ["POST"], "path_prefix": "/payments", "authority": null },
      "require_key": false,
      "scope": "route",
      "anonymous": "reject",
      "lease_ms": 30000,
      "renew_interval_ms": 10000,
      "follower_wait_ms": 5000,
      "retention_s": 86400,
      "failure_cooldown_ms": 2000,
      "max_request_body_bytes": 1048576,
      "max_cacheable_response_bytes": 2097152,
      "replay_headers": [],
      "fingerprint_headers": ["if-match", "x-approval-digest"],
      "failure_mode": "closed",
      "uncertain": "retry",
      "router_retries": "off"
    }
  ]
}"#;

const MINIMAL: &str = r#"{
  "lease_store": {"cluster": "ls", "token": "t"},
  "policies": [{"name": "all"}]
}"#;

/// Parses `MINIMAL` with `patch` merged into its first policy (or the root
/// when `at_root`).
fn with(patch: serde_json::Value, at_root: bool) -> Result<Config, ConfigError> {
    let mut doc: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
    let target = if at_root {
        &mut doc
    } else {
        &mut doc["policies"][0]
    };
    for (k, v) in patch.as_object().unwrap() {
        target[k] = v.clone();
    }
    parse_plugin_config(doc.to_string().as_bytes())
}

fn policy_err(patch: serde_json::Value) -> ConfigError {
    with(patch, false).unwrap_err()
}

fn root_err(patch: serde_json::Value) -> ConfigError {
    with(patch, true).unwrap_err()
}

#[test]
fn the_contract_example_parses() {
    let config = parse_plugin_config(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(config.lease_store.cluster, "keyflight_lease_store");
    assert_eq!(config.lease_store.authority, "lease-store");
    assert_eq!(
        config.identity.actor,
        vec![Rc::new(PrincipalSource::Header("x-actor".into()))]
    );
    assert_eq!(config.identity.principal.len(), 3);
    let p = &config.policies[0];
    assert_eq!(p.matcher.methods, vec!["POST"]);
    assert_eq!(p.matcher.path_prefix, "/payments");
    assert_eq!(p.matcher.authority, None);
    assert_eq!(p.renew_interval, Duration::from_secs(10));
}

#[test]
fn defaults_are_applied() {
    let config = parse_plugin_config(MINIMAL.as_bytes()).unwrap();
    assert_eq!(config.lease_store.authority, "ls");
    assert_eq!(config.lease_store.timeout, Duration::from_millis(1000));
    assert_eq!(config.key_header, "idempotency-key");
    assert_eq!(config.mode, Mode::Enforce);
    assert_eq!(config.status_profile, StatusProfile::Keyflight);
    assert_eq!(config.identity, Identity::default());
    let p = &config.policies[0];
    assert_eq!(p.matcher.methods, vec!["POST", "PUT", "PATCH", "DELETE"]);
    assert_eq!(p.matcher.path_prefix, "/");
    assert!(p.matcher.path_regex.is_none());
    assert!(!p.require_key);
    assert_eq!(p.scope, ScopeMode::Route);
    assert_eq!(p.anonymous, Anonymous::Reject);
    assert_eq!(p.lease, Duration::from_secs(30));
    assert_eq!(p.renew_interval, Duration::from_secs(10));
    assert_eq!(p.follower_wait, Duration::from_secs(5));
    assert_eq!(p.retention, Duration::from_secs(86_400));
    assert_eq!(p.failure_cooldown, Duration::from_secs(2));
    assert_eq!(p.max_request_body_bytes, 1024 * 1024);
    assert_eq!(p.max_cacheable_response_bytes, 2 * 1024 * 1024);
    let replay: Vec<&str> = p.replay_headers.iter().map(String::as_str).collect();
    assert_eq!(
        replay,
        vec![
            "cache-control",
            "content-disposition",
            "content-encoding",
            "content-language",
            "content-type",
            "etag",
            "location"
        ]
    );
    assert_eq!(p.fingerprint_headers, vec!["if-match", "x-approval-digest"]);
    assert_eq!(p.failure_mode, FailureMode::Closed);
    assert_eq!(p.uncertain, Uncertain::Hold);
    assert_eq!(p.router_retries, RouterRetries::Off);
    assert_eq!(p.server_errors, ServerErrors::Cooldown);
    assert_eq!(p.record, RecordWhen::BeforeReply);
    assert_eq!(p.mismatch_status, 409);
    assert_eq!(p.in_progress, InProgress::Wait);
}

#[test]
fn renew_interval_defaults_to_a_third_of_the_lease() {
    let config = with(serde_json::json!({"lease_ms": 9000}), false).unwrap();
    assert_eq!(config.policies[0].renew_interval, Duration::from_secs(3));
}

#[test]
fn names_and_values_are_normalized() {
    let config = with(
        serde_json::json!({
            "replay_headers": ["X-Signature"],
            "fingerprint_headers": ["X-Approval"],
            "match": {"methods": ["post"], "authority": "API.Example.com", "path_regex": "^/orders/[0-9]+$"}
        }),
        false,
    )
    .unwrap();
    let p = &config.policies[0];
    assert!(p.replay_headers.contains("x-signature"));
    assert_eq!(p.fingerprint_headers, vec!["x-approval"]);
    assert_eq!(p.matcher.methods, vec!["POST"]);
    assert_eq!(
        p.matcher.authority,
        Some(AuthorityPattern {
            host: "api.example.com".into(),
            port: None
        })
    );
    let matches = |method: &str, path: &str, authority: &str| {
        p.matcher
            .matches(&Target::new(method, path, authority, Some("https")))
    };
    assert!(matches("POST", "/orders/12?x=1", "api.example.com"));
    assert!(!matches("POST", "/orders/12/items", "api.example.com"));
    assert!(!matches("POST", "/orders/12", "other.example.com"));
    assert!(!matches("GET", "/orders/12", "api.example.com"));
}

#[test]
fn respelled_targets_cannot_escape_a_policy() {
    // F0: every spelling an upstream could route to /payments is guarded.
    let config = with(
        serde_json::json!({"match": {"methods": ["POST"], "path_prefix": "/payments", "authority": "api.example.com"}}),
        false,
    )
    .unwrap();
    let m = &config.policies[0].matcher;
    for path in [
        "/payments",
        "//payments",
        "/x/../payments",
        "/x/%2e%2E/payments",
        "/%70ayments",
        "/pay%6Dents?x=1",
        "/x%2F..%2Fpayments",
        "/./payments/1",
        "/PAYMENTS",
        "/%50ayments",
        "/x\\..\\Payments",
        "/x%5c..%5cpayments",
    ] {
        assert!(
            m.matches(&Target::new("POST", path, "api.example.com", Some("https"))),
            "{path}"
        );
    }
    for authority in [
        "API.example.com",
        "api.example.com.",
        "api.example.com:443",
        "api.example.com:80",
        "api.example.com:8443",
    ] {
        assert!(
            m.matches(&Target::new("POST", "/payments", authority, Some("https"))),
            "{authority}"
        );
    }
    assert!(m.matches(&Target::new(
        "post",
        "/payments",
        "api.example.com",
        Some("https")
    )));
    assert!(!m.matches(&Target::new(
        "POST",
        "/pay",
        "api.example.com",
        Some("https")
    )));
    assert!(!m.matches(&Target::new(
        "POST",
        "/payments",
        "api.example.org",
        Some("https")
    )));
}

#[test]
fn an_authority_with_a_port_matches_that_port_explicit_or_implied() {
    let config = with(
        serde_json::json!({"match": {"authority": "API.example.com.:443"}}),
        false,
    )
    .unwrap();
    let m = &config.policies[0].matcher;
    let on = |authority: &str, scheme: &str| {
        m.matches(&Target::new("POST", "/", authority, Some(scheme)))
    };
    assert!(on("api.example.com", "https"));
    assert!(on("api.example.com:443", "https"));
    assert!(on("api.example.com:443", "http"));
    assert!(!on("api.example.com", "http"));
    assert!(!on("api.example.com:8443", "https"));
}

#[test]
fn path_case_is_insensitive_unless_a_policy_says_sensitive() {
    let target = |path: &str| Target::new("POST", path, "api.example.com", Some("https"));
    let default = with(
        serde_json::json!({"match": {"path_prefix": "/Payments"}}),
        false,
    )
    .unwrap();
    let m = &default.policies[0].matcher;
    assert_eq!(m.path_case, PathCase::Insensitive);
    assert!(m.matches(&target("/payments")) && m.matches(&target("/PAYMENTS")));
    let sensitive = with(
        serde_json::json!({"match": {"path_prefix": "/Payments", "path_case": "sensitive"}}),
        false,
    )
    .unwrap();
    let m = &sensitive.policies[0].matcher;
    assert!(m.matches(&target("/Payments")) && m.matches(&target("/%50ayments")));
    assert!(!m.matches(&target("/payments")) && !m.matches(&target("/PAYMENTS")));
    let err = policy_err(serde_json::json!({"match": {"path_case": "upper"}}));
    assert_eq!(err.path, "policies[0].match.path_case");
}

#[test]
fn each_invalid_field_is_named() {
    use serde_json::json;
    let cases: Vec<(ConfigError, &str)> = vec![
        (policy_err(json!({"lease_ms": 999})), "policies[0].lease_ms"),
        (
            policy_err(json!({"lease_ms": 3_600_001})),
            "policies[0].lease_ms",
        ),
        (
            policy_err(json!({"lease_ms": 3000, "renew_interval_ms": 3000})),
            "policies[0].renew_interval_ms",
        ),
        (
            // Past half the lease, one late renewal would let the lease lapse.
            policy_err(json!({"lease_ms": 3000, "renew_interval_ms": 1501})),
            "policies[0].renew_interval_ms",
        ),
        (
            policy_err(json!({"follower_wait_ms": 60_001})),
            "policies[0].follower_wait_ms",
        ),
        (
            policy_err(json!({"retention_s": 0})),
            "policies[0].retention_s",
        ),
        (
            policy_err(json!({"failure_cooldown_ms": 86_400_001})),
            "policies[0].failure_cooldown_ms",
        ),
        (
            policy_err(json!({"max_request_body_bytes": 64 * 1024 * 1024 + 1})),
            "policies[0].max_request_body_bytes",
        ),
        (
            policy_err(json!({"max_cacheable_response_bytes": 64 * 1024 * 1024 + 1})),
            "policies[0].max_cacheable_response_bytes",
        ),
        (
            policy_err(json!({"replay_headers": ["ok", "set-cookie"]})),
            "policies[0].replay_headers[1]",
        ),
        (
            policy_err(json!({"replay_headers": ["x-csrf-token"]})),
            "policies[0].replay_headers[0]",
        ),
        (
            policy_err(json!({"replay_headers": ["bad header"]})),
            "policies[0].replay_headers[0]",
        ),
        (
            policy_err(json!({"fingerprint_headers": ["authorization"]})),
            "policies[0].fingerprint_headers[0]",
        ),
        (
            policy_err(json!({"fingerprint_headers": ["if-match", "x-request-id"]})),
            "policies[0].fingerprint_headers[1]",
        ),
        (
            policy_err(json!({"fingerprint_headers": ["if-match", "If-Match"]})),
            "policies[0].fingerprint_headers[1]",
        ),
        (policy_err(json!({"name": ""})), "policies[0].name"),
        (
            policy_err(json!({"match": {"methods": []}})),
            "policies[0].match.methods",
        ),
        (
            policy_err(json!({"match": {"methods": ["PO ST"]}})),
            "policies[0].match.methods[0]",
        ),
        (
            policy_err(json!({"match": {"path_prefix": "payments"}})),
            "policies[0].match.path_prefix",
        ),
        (
            policy_err(json!({"match": {"path_regex": "("}})),
            "policies[0].match.path_regex",
        ),
        (
            policy_err(json!({"match": {"authority": ""}})),
            "policies[0].match.authority",
        ),
        (policy_err(json!({"scope": "global"})), "policies[0].scope"),
        (
            policy_err(json!({"anonymous": "allow"})),
            "policies[0].anonymous",
        ),
        (
            policy_err(json!({"failure_mode": "half"})),
            "policies[0].failure_mode",
        ),
        (
            policy_err(json!({"uncertain": "maybe"})),
            "policies[0].uncertain",
        ),
        (
            policy_err(json!({"router_retries": "on"})),
            "policies[0].router_retries",
        ),
        (
            policy_err(json!({"retention_s": 29, "lease_ms": 30000})),
            "policies[0].retention_s",
        ),
        (
            policy_err(json!({"server_errors": "release"})),
            "policies[0].server_errors",
        ),
        (policy_err(json!({"record": "later"})), "policies[0].record"),
        (
            policy_err(json!({"mismatch_status": 400})),
            "policies[0].mismatch_status",
        ),
        (
            policy_err(json!({"mismatch_status": "422"})),
            "policies[0].mismatch_status",
        ),
        (
            policy_err(json!({"in_progress": "reject"})),
            "policies[0].in_progress",
        ),
        (
            policy_err(json!({"in_progress": "conflict", "follower_wait_ms": 5000})),
            "policies[0].follower_wait_ms",
        ),
        (
            policy_err(json!({"lease_ms": "30s"})),
            "policies[0].lease_ms",
        ),
        (policy_err(json!({"surprise": 1})), "policies[0].surprise"),
        (root_err(json!({"mode": "shadow"})), "mode"),
        (root_err(json!({"status_profile": "rfc"})), "status_profile"),
        (
            root_err(json!({"key_header": "idempotency key"})),
            "key_header",
        ),
        (root_err(json!({"policies": []})), "policies"),
        (root_err(json!({"extra": true})), "extra"),
        (
            root_err(json!({"lease_store": {"cluster": "", "token": "t"}})),
            "lease_store.cluster",
        ),
        (
            root_err(json!({"lease_store": {"cluster": "c", "token": ""}})),
            "lease_store.token",
        ),
        (
            root_err(json!({"lease_store": {"cluster": "c", "token": "t", "timeout_ms": 0}})),
            "lease_store.timeout_ms",
        ),
        (
            root_err(json!({"lease_store": {"cluster": "c", "token": "t", "authority": "a b"}})),
            "lease_store.authority",
        ),
        (
            root_err(json!({"identity": {"principal": [{"header": ""}]}})),
            "identity.principal[0].header",
        ),
        (
            root_err(json!({"identity": {"actor": [{"property": []}]}})),
            "identity.actor[0].property",
        ),
        (
            root_err(
                json!({"identity": {"principal": [{"jwt_claim": {"metadata_key": "p", "claim": ""}}]}}),
            ),
            "identity.principal[0].jwt_claim.claim",
        ),
    ];
    for (error, path) in cases {
        assert_eq!(error.path, path, "{error}");
    }
}

#[test]
fn duplicate_policy_names_are_refused() {
    let json = r#"{"lease_store": {"cluster": "c", "token": "t"},
                   "policies": [{"name": "a"}, {"name": "a"}]}"#;
    let error = parse_plugin_config(json.as_bytes()).unwrap_err();
    assert_eq!(error.path, "policies[1].name");
}

#[test]
fn error_line_names_field_and_rule() {
    let error = policy_err(serde_json::json!({"lease_ms": 10}));
    assert_eq!(
        error.to_string(),
        "policies[0].lease_ms: must be between 1000 and 3600000"
    );
}

#[test]
fn not_json_is_refused() {
    assert_eq!(parse_plugin_config(b"").unwrap_err().path, "configuration");
    assert!(parse_plugin_config(b"{} trailing").is_err());
}

#[test]
fn tick_period_follows_the_shortest_renew_interval_up_to_a_quarter_second() {
    let config = with_timeout(
        500,
        serde_json::json!({"lease_ms": 2000, "renew_interval_ms": 400}),
    )
    .unwrap();
    assert_eq!(config.tick_period(), Duration::from_millis(100));
    let config = parse_plugin_config(MINIMAL.as_bytes()).unwrap();
    assert_eq!(config.tick_period(), Duration::from_millis(250));
}

#[test]
fn the_edge_cache_is_on_by_default_and_bounded() {
    let config = with(serde_json::json!({}), true).unwrap();
    let cache = config.edge_cache.unwrap();
    assert_eq!(
        cache.slots as u64,
        DEFAULT_EDGE_CACHE_MAX_BYTES / DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES
    );
    assert_eq!(
        cache.max_entry_bytes as u64,
        DEFAULT_EDGE_CACHE_MAX_ENTRY_BYTES
    );
    assert_eq!(cache.ttl, Duration::from_secs(DEFAULT_EDGE_CACHE_TTL_S));
    let policy = &config.policies[0];
    assert_eq!(
        config.edge_cache_for(policy),
        Some((cache, Duration::from_secs(DEFAULT_EDGE_CACHE_TTL_S)))
    );
}

#[test]
fn the_edge_cache_ttl_never_exceeds_a_policys_retention() {
    let config = with(
        serde_json::json!({"policies": [{"name": "p", "retention_s": 5, "lease_ms": 5000}], "edge_cache": {"ttl_s": 600}}),
        true,
    )
    .unwrap();
    let (_, ttl) = config.edge_cache_for(&config.policies[0]).unwrap();
    assert_eq!(ttl, Duration::from_secs(5));
}

#[test]
fn the_edge_cache_can_be_turned_off_globally_or_per_policy() {
    let off = with(serde_json::json!({"edge_cache": {"max_bytes": 0}}), true).unwrap();
    assert_eq!(off.edge_cache, None);
    assert_eq!(off.edge_cache_for(&off.policies[0]), None);
    let opted_out = with(serde_json::json!({"edge_cache": false}), false).unwrap();
    assert!(opted_out.edge_cache.is_some());
    assert_eq!(opted_out.edge_cache_for(&opted_out.policies[0]), None);
}

#[test]
fn the_epoch_is_needed_only_where_the_edge_cache_can_serve() {
    let enforce = with(serde_json::json!({}), false).unwrap();
    assert!(enforce.edge_cache_in_use().is_some());
    let dry_run = with(serde_json::json!({"mode": "dry_run"}), true).unwrap();
    assert!(dry_run.edge_cache_in_use().is_none());
    let opted_out = with(serde_json::json!({"edge_cache": false}), false).unwrap();
    assert!(opted_out.edge_cache_in_use().is_none());
    let off = with(serde_json::json!({"edge_cache": {"max_bytes": 0}}), true).unwrap();
    assert!(off.edge_cache_in_use().is_none());
    // The epoch interval (1 s for the default 3 s bound) is coarser than the
    // outbox's 250 ms cap; a tighter bound tightens the tick.
    assert_eq!(enforce.tick_period(), Duration::from_millis(250));
    let tight = with(
        serde_json::json!({"edge_cache": {"max_staleness_ms": 300}}),
        true,
    )
    .unwrap();
    assert_eq!(tight.tick_period(), Duration::from_millis(100));
}

#[test]
fn invalid_edge_cache_fields_are_named() {
    for (patch, path) in [
        (
            serde_json::json!({"max_entry_bytes": 10}),
            "edge_cache.max_entry_bytes",
        ),
        (
            serde_json::json!({"max_bytes": 2048, "max_entry_bytes": 4096}),
            "edge_cache.max_bytes",
        ),
        (serde_json::json!({"ttl_s": 0}), "edge_cache.ttl_s"),
        (
            serde_json::json!({"max_staleness_ms": 100}),
            "edge_cache.max_staleness_ms",
        ),
        (serde_json::json!({"slots": 3}), "edge_cache"),
    ] {
        let error = root_err(serde_json::json!({"edge_cache": patch}));
        assert!(error.path.starts_with(path), "{patch}: {error}");
    }
}

#[test]
fn a_jwt_claim_may_be_a_dotted_path_of_names() {
    let source = |claim: &str| serde_json::json!({"identity": {"actor": [{"jwt_claim": {"metadata_key": "jwt_payload", "claim": claim}}]}});
    let config = with(source("act.sub"), true).unwrap();
    assert_eq!(
        *config.identity.actor[0],
        PrincipalSource::JwtClaim {
            metadata_key: "jwt_payload".into(),
            claim: vec!["act".into(), "sub".into()],
        }
    );
    for bad in ["", "act.", ".sub", "act..sub"] {
        let error = root_err(source(bad));
        assert_eq!(error.path, "identity.actor[0].jwt_claim.claim", "{bad:?}");
    }
}

#[test]
fn a_claim_that_is_a_json_object_is_refused_at_start() {
    let source = |claim: &str| serde_json::json!({"identity": {"actor": [{"jwt_claim": {"metadata_key": "jwt_payload", "claim": claim}}]}});
    for object in ["act", "may_act", "cnf", "aud", "act.act"] {
        let error = root_err(source(object));
        assert_eq!(error.path, "identity.actor[0].jwt_claim.claim", "{object}");
        assert!(error.message.contains("object"), "{error}");
    }
}

#[test]
fn the_outbox_and_its_retry_budget_have_defaults_and_bounds() {
    let config = parse_plugin_config(MINIMAL.as_bytes()).unwrap();
    assert_eq!(config.outbox.max_bytes, 16 * 1024 * 1024);
    assert_eq!(
        config.policies[0].record_retry_budget,
        Duration::from_secs(120)
    );
    let config = with(
        serde_json::json!({"outbox": {"max_bytes": 1_048_576}}),
        true,
    )
    .unwrap();
    assert_eq!(config.outbox.max_bytes, 1_048_576);
    let config = with(serde_json::json!({"record_retry_budget_ms": 30_000}), false).unwrap();
    assert_eq!(
        config.policies[0].record_retry_budget,
        Duration::from_secs(30)
    );

    let err = with(serde_json::json!({"outbox": {"max_bytes": 10}}), true).unwrap_err();
    assert_eq!(err.path, "outbox.max_bytes");
    let err = with(serde_json::json!({"outbox": {"max_entries": 10}}), true).unwrap_err();
    assert_eq!(err.path, "outbox.max_entries");
    let err = with(serde_json::json!({"record_retry_budget_ms": 0}), false).unwrap_err();
    assert_eq!(err.path, "policies[0].record_retry_budget_ms");
}

#[test]
fn a_record_cap_the_store_would_refuse_is_a_configuration_error() {
    // 7 MiB base64-encoded is ~9.3 MiB: over the store's default 8 MiB limit.
    let err = with(
        serde_json::json!({"max_cacheable_response_bytes": 7 * 1024 * 1024}),
        false,
    )
    .unwrap_err();
    assert_eq!(err.path, "policies[0].max_cacheable_response_bytes");
    assert!(err.message.contains("lease_store.max_body_bytes"), "{err}");

    // Raising the store's limit (on both sides) makes it work.
    let mut doc: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
    doc["lease_store"]["max_body_bytes"] = serde_json::json!(16 * 1024 * 1024);
    doc["policies"][0]["max_cacheable_response_bytes"] = serde_json::json!(7 * 1024 * 1024);
    assert!(parse_plugin_config(doc.to_string().as_bytes()).is_ok());

    // The default cap fits the default limit.
    assert!(finalize_bytes(2 * 1024 * 1024) <= DEFAULT_STORE_MAX_BODY_BYTES);
}

/// Parses `MINIMAL` with `lease_store.timeout_ms` set and `policy` merged
/// into its first policy.
fn with_timeout(timeout_ms: u64, policy: serde_json::Value) -> Result<Config, ConfigError> {
    let mut doc: serde_json::Value = serde_json::from_str(MINIMAL).unwrap();
    doc["lease_store"]["timeout_ms"] = timeout_ms.into();
    for (k, v) in policy.as_object().unwrap() {
        doc["policies"][0][k] = v.clone();
    }
    parse_plugin_config(doc.to_string().as_bytes())
}

#[test]
fn a_renew_that_hangs_must_leave_time_to_time_out_and_retry_within_the_lease() {
    use serde_json::json;
    // 400 + 2 × 1000 + 600 = 3000: the renew sent one interval after the
    // last one may hang for the whole call timeout, and its retry still has a
    // whole timeout to land before the lease runs out.
    let fits = with_timeout(1000, json!({"lease_ms": 3000, "renew_interval_ms": 400})).unwrap();
    assert_eq!(fits.policies[0].renew_interval, Duration::from_millis(400));
    for (timeout_ms, policy) in [
        (1000, json!({"lease_ms": 3000, "renew_interval_ms": 401})),
        (1000, json!({"lease_ms": 3000, "renew_interval_ms": 1000})),
        (1001, json!({"lease_ms": 3000, "renew_interval_ms": 400})),
        (1000, json!({"lease_ms": 1000})),
    ] {
        let err = with_timeout(timeout_ms, policy.clone()).unwrap_err();
        assert_eq!(err.path, "policies[0].lease_ms", "{policy}: {err}");
        for field in ["renew_interval_ms", "lease_store.timeout_ms", "lease_ms"] {
            assert!(err.message.contains(field), "{policy}: {err}");
        }
    }
}

#[test]
fn the_default_renew_interval_shrinks_so_a_hung_renew_can_be_retried() {
    use serde_json::json;
    let short = with_timeout(1000, json!({"lease_ms": 3000})).unwrap();
    assert_eq!(short.policies[0].renew_interval, Duration::from_millis(400));
    let long = with_timeout(1000, json!({"lease_ms": 9000})).unwrap();
    assert_eq!(long.policies[0].renew_interval, Duration::from_secs(3));
}

#[test]
fn the_forgotten_statuses_are_every_redirect_but_303_and_the_unnamed_4xx_by_default() {
    let config = parse_plugin_config(MINIMAL.as_bytes()).unwrap();
    let forgotten = &config.policies[0].forget_statuses;
    for status in [
        300, 301, 302, 304, 307, 308, 401, 403, 405, 412, 413, 451, 499,
    ] {
        assert!(forgotten.contains(&status), "{status}");
    }
    for status in [200, 201, 303, 400, 404, 408, 409, 422, 429, 500] {
        assert!(!forgotten.contains(&status), "{status}");
    }
    let listed = with(serde_json::json!({"forget_statuses": [302, 401]}), false).unwrap();
    assert_eq!(
        listed.policies[0].forget_statuses,
        BTreeSet::from([302, 401])
    );
}

#[test]
fn only_a_3xx_or_4xx_that_is_not_a_failure_may_be_forgotten() {
    use serde_json::json;
    for (list, at) in [
        (json!([200]), "policies[0].forget_statuses[0]"),
        (json!([401, 201]), "policies[0].forget_statuses[1]"),
        (json!([500]), "policies[0].forget_statuses[0]"),
        (json!([408]), "policies[0].forget_statuses[0]"),
        (json!([429]), "policies[0].forget_statuses[0]"),
        (json!([302, 302]), "policies[0].forget_statuses[1]"),
        (json!([99]), "policies[0].forget_statuses[0]"),
    ] {
        let err = policy_err(json!({ "forget_statuses": list }));
        assert_eq!(err.path, at, "{list}: {err}");
    }
}

#[test]
fn not_principals_are_names_as_a_source_reads_them() {
    let ok = with(
        serde_json::json!({"identity": {"not_principals": ["spiffe://cluster.local/ns/gw/sa/gw"]}}),
        true,
    )
    .unwrap();
    assert!(
        ok.identity
            .not_principals
            .contains("spiffe://cluster.local/ns/gw/sa/gw")
    );
    for bad in ["", " spiffe://x", "  "] {
        let err = root_err(serde_json::json!({"identity": {"not_principals": ["ok", bad]}}));
        assert_eq!(err.path, "identity.not_principals[1]", "{bad:?}");
    }
}

#[test]
fn delegation_is_the_pair_unless_configured_and_an_explicit_pair_needs_both_lists() {
    use serde_json::json;
    let sources = json!({"actor": [{"header": "x-actor"}], "principal": [{"header": "x-user"}]});
    let default = with(json!({ "identity": sources }), true).unwrap();
    assert_eq!(default.identity.delegation, Delegation::SubjectAndActor);
    let mut actor = sources.clone();
    actor["delegation"] = json!("actor");
    let config = with(json!({ "identity": actor }), true).unwrap();
    assert_eq!(config.identity.delegation, Delegation::Actor);
    // The same sources under another delegation are another recipe.
    let mut transition = actor.clone();
    transition["previous"] = sources.clone();
    let config = with(json!({ "identity": transition }), true).unwrap();
    assert_eq!(
        config.identity.previous.map(|p| p.delegation),
        Some(Delegation::SubjectAndActor)
    );
    // The default asks nothing of a single list.
    assert!(
        with(
            json!({"identity": {"principal": [{"header": "x-user"}]}}),
            true
        )
        .is_ok()
    );
    for (identity, at) in [
        (
            json!({"principal": [{"header": "x-user"}], "delegation": "subject_and_actor"}),
            "identity.delegation",
        ),
        (
            json!({"actor": [{"header": "x-actor"}], "delegation": "subject_and_actor"}),
            "identity.delegation",
        ),
        (
            json!({"principal": [{"header": "x-user"}],
                   "previous": {"actor": [{"header": "x-actor"}], "delegation": "subject_and_actor"}}),
            "identity.previous.delegation",
        ),
        (json!({"delegation": "subject"}), "identity.delegation"),
        (
            json!({"principal": [{"header": "x-user"}],
                   "previous": {"not_principals": [" gw"]}}),
            "identity.previous.not_principals[0]",
        ),
    ] {
        let err = root_err(json!({ "identity": identity }));
        assert_eq!(err.path, at, "{identity}: {err}");
    }
}

/// A claim carries the request's scope under `identity.previous` too, and the store answers
/// from either record: a previous recipe that gives two callers one scope, where the current
/// one tells them apart, replays one caller's answer to the other
/// (`docs/identity.md#the-delegated-principal`).
#[test]
fn a_previous_recipe_broader_than_the_current_one_is_refused() {
    use serde_json::json;
    let actor = json!([{"header": "x-actor"}]);
    let user = json!([{"header": "x-user"}]);
    let delegated = json!({"actor": actor, "principal": user, "delegation": "subject_and_actor"});
    for (previous, at) in [
        // The actor alone: every user one service acts for shares its scope.
        (
            json!({"actor": actor, "principal": user, "delegation": "actor"}),
            "identity.previous",
        ),
        // The subject alone: one user's requests through two services share one.
        (json!({"principal": user}), "identity.previous"),
        (json!({"actor": actor}), "identity.previous"),
        // A name that is no principal now was one then: the gateway, for every user behind it.
        (
            json!({"actor": actor, "principal": user, "delegation": "subject_and_actor",
                   "not_principals": []}),
            "identity.previous.not_principals",
        ),
    ] {
        let mut identity = delegated.clone();
        identity["not_principals"] = json!(["spiffe://mesh/gateway"]);
        identity["previous"] = previous.clone();
        if previous.get("not_principals").is_none() {
            identity["previous"]["not_principals"] = identity["not_principals"].clone();
        }
        let err = root_err(json!({ "identity": identity }));
        assert_eq!(err.path, at, "{previous}: {err}");
        assert!(err.message.contains("broader"), "{err}");
    }
    // Narrower or as fine is a transition: a rollback to the actor alone names the pair, a
    // renamed source names the old one.
    let mut rollback = delegated.clone();
    rollback["delegation"] = json!("actor");
    rollback["previous"] = delegated.clone();
    assert!(with(json!({ "identity": rollback }), true).is_ok());
    let renamed = json!({"principal": [{"header": "x-subject"}], "previous": {"principal": user}});
    assert!(with(json!({ "identity": renamed }), true).is_ok());
}

#[test]
fn recording_after_the_reply_is_read_per_policy_and_ticks_finely() {
    let config = with(serde_json::json!({"record": "after_reply"}), false).unwrap();
    assert_eq!(config.policies[0].record, RecordWhen::AfterReply);
    assert_eq!(
        config.tick_period(),
        Duration::from_millis(AFTER_REPLY_TICK_MS),
        "each answer's finalize goes out from the next tick"
    );
}

#[test]
fn the_drafts_settings_are_read_per_policy() {
    let config = with(
        serde_json::json!({"mismatch_status": 422, "in_progress": "conflict", "server_errors": "record",
               "uncertain": "record"}),
        false,
    )
    .unwrap();
    let p = &config.policies[0];
    assert_eq!(p.mismatch_status, 422);
    assert_eq!(p.in_progress, InProgress::Conflict);
    assert_eq!(
        p.follower_wait,
        Duration::ZERO,
        "a conflict at once never waits"
    );
    assert_eq!(p.server_errors, ServerErrors::Record);
    assert_eq!(p.uncertain, Uncertain::Record);
    let explicit_zero = with(
        serde_json::json!({"in_progress": "conflict", "follower_wait_ms": 0}),
        false,
    );
    assert_eq!(
        explicit_zero.unwrap().policies[0].follower_wait,
        Duration::ZERO
    );
}

#[test]
fn the_status_profile_is_the_default_of_each_policys_statuses() {
    use keyflight_protocol::ProblemCode::{IdempotencyConflict, RequestInProgress};
    let ietf = with(serde_json::json!({"status_profile": "ietf"}), true).unwrap();
    let p = &ietf.policies[0];
    assert_eq!(p.mismatch_status, 422);
    assert_eq!(p.status_of(IdempotencyConflict, ietf.status_profile), 422);
    assert_eq!(p.status_of(RequestInProgress, ietf.status_profile), 409);
    let keyflight = with(serde_json::json!({}), true).unwrap();
    let p = &keyflight.policies[0];
    assert_eq!(
        p.status_of(IdempotencyConflict, keyflight.status_profile),
        409
    );
    assert_eq!(
        p.status_of(RequestInProgress, keyflight.status_profile),
        503
    );
    let conflict = with(serde_json::json!({"in_progress": "conflict"}), false).unwrap();
    let p = &conflict.policies[0];
    assert_eq!(p.status_of(RequestInProgress, conflict.status_profile), 409);
}

#[test]
fn reconcile_names_its_endpoint_exactly_when_the_policy_reconciles() {
    let endpoint = serde_json::json!({"cluster": "payments"});
    let config = with(
        serde_json::json!({"uncertain": "reconcile", "reconcile": endpoint}),
        false,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let reconcile = config.policies[0].reconcile.clone().unwrap();
    assert_eq!(
        (
            reconcile.authority.as_str(),
            reconcile.path.as_str(),
            reconcile.timeout.as_millis(),
            reconcile.retry_after_s
        ),
        ("payments", "/.well-known/keyflight/reconcile", 2000, 1)
    );
    assert!(config.reserves("/.well-known/keyflight/reconcile"));
    for (patch, field) in [
        (
            serde_json::json!({"uncertain": "reconcile"}),
            "policies[0].reconcile",
        ),
        (
            serde_json::json!({"uncertain": "hold", "reconcile": endpoint}),
            "policies[0].reconcile",
        ),
        (
            serde_json::json!({"reconcile": endpoint}),
            "policies[0].reconcile",
        ),
        (
            serde_json::json!({"uncertain": "reconcile", "reconcile": {"cluster": ""}}),
            "policies[0].reconcile.cluster",
        ),
        (
            serde_json::json!({"uncertain": "reconcile", "reconcile": {"cluster": "p", "path": "/r?x=1"}}),
            "policies[0].reconcile.path",
        ),
        (
            serde_json::json!({"uncertain": "reconcile", "reconcile": {"cluster": "p", "path": "relative"}}),
            "policies[0].reconcile.path",
        ),
        (
            serde_json::json!({"uncertain": "reconcile", "reconcile": {"cluster": "p", "timeout_ms": 0}}),
            "policies[0].reconcile.timeout_ms",
        ),
    ] {
        assert_eq!(policy_err(patch.clone()).path, field, "{patch}");
    }
}
