//! The `keyflight` command's tools about the filter's configuration: `fingerprint` (K5),
//! `recipe-diff` and `openapi-overlay`, run as a user runs them.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use keyflight_protocol::{
    Party, Principal, PrincipalSource, RequestHead, Rules, ScopeMode, Target,
};

const BIN: &str = env!("CARGO_BIN_EXE_keyflight");

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn fingerprint_prints_the_filters_fingerprint_and_the_scope() {
    let output = Command::new(BIN)
        .args([
            "fingerprint",
            "--method",
            "POST",
            "--path",
            "/payments?b=2&a=1",
            "--content-type",
            "application/json",
            "--body",
            "{\"b\": 1, \"a\": 1.0}",
            "--header",
            "If-Match: \"v1\"",
            "--header",
            "x-request-id: ignored",
            "--key",
            "key-1",
            "--principal-source",
            "header:x-user",
            "--principal",
            "alice",
            "--authority",
            "API.example.com:443",
            "--scheme",
            "https",
            "--workload",
            "spiffe://cluster.local/ns/payments/sa/checkout",
        ])
        .output()
        .unwrap();
    let text = stdout(&output);
    let headers: Vec<(String, Vec<u8>)> = [
        (":method", "POST"),
        (":path", "/payments?b=2&a=1"),
        (":authority", "api.example.com"),
        (":scheme", "https"),
        ("content-type", "application/json"),
        ("if-match", "\"v1\""),
        ("idempotency-key", "key-1"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect();
    let names = ["if-match".to_owned(), "x-approval-digest".to_owned()];
    let rules = Rules {
        key_header: "idempotency-key",
        fingerprint_headers: &names,
    };
    let head =
        RequestHead::read(Target::from_headers(&headers).unwrap(), &headers, &rules).unwrap();
    let source = PrincipalSource::Header("x-user".into());
    let expected = head.identify(
        Principal::Named {
            source: &source,
            name: "alice",
        },
        ScopeMode::Route,
        b"{\"b\": 1, \"a\": 1.0}",
    );
    assert!(
        text.contains(&format!(
            "fingerprint:      {}",
            expected.explanation.fingerprint
        )),
        "{text}"
    );
    let scope = expected.scope.unwrap();
    assert!(
        text.contains(&format!("scope:            {scope}")),
        "{text}"
    );
    // Under --trust-xfcc the record is the claiming workload's (`mesh_identity.rs`).
    let record = keyflight_protocol::scope::record_scope(
        "spiffe://cluster.local/ns/payments/sa/checkout",
        &scope,
    );
    assert!(
        text.contains(&format!("lease-store records show {}", record.to_hex())),
        "{text}"
    );
    assert!(
        text.contains("authority:        api.example.com\n"),
        "{text}"
    );
    assert!(
        text.contains("media type:       application/json\n"),
        "{text}"
    );
    assert!(
        text.contains("canonical body:   {\"a\":1,\"b\":1}"),
        "{text}"
    );
    assert!(text.contains("query:            a=1"), "{text}");
    assert!(
        !text.contains("x-request-id"),
        "transport headers never count: {text}"
    );
}

/// `keyflight recipe-diff` reads two plugin configurations and says what the change does
/// to identities: non-zero for a scope change with no previous recipe, zero with one.
#[test]
fn recipe_diff_fails_an_identity_change_without_a_previous_recipe() {
    let dir = std::env::temp_dir().join(format!("recipe-diff-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, policy: &str| {
        let path = dir.join(name);
        let doc = format!(
            r#"{{"lease_store": {{"cluster": "ls", "token": "t"}},
                "identity": {{"principal": [{{"header": "x-user"}}]}},
                "policies": [{{"name": "payments", "match": {{"path_prefix": "/p"}} {policy}}}]}}"#
        );
        std::fs::write(&path, doc).unwrap();
        path
    };
    let route = write("route.json", "");
    let service = write("service.json", r#", "scope": "service""#);
    let transition = write(
        "transition.json",
        r#", "scope": "service", "previous": {"scope": "route"}"#,
    );
    let diff = |old: &std::path::Path, new: &std::path::Path| {
        Command::new(BIN)
            .args(["recipe-diff", "--old"])
            .arg(old)
            .arg("--new")
            .arg(new)
            .output()
            .unwrap()
    };
    let unsafe_change = diff(&route, &service);
    assert!(!unsafe_change.status.success());
    let report = String::from_utf8_lossy(&unsafe_change.stdout);
    assert!(
        report.contains("policy payments: UNSAFE") && report.contains("scope: route -> service"),
        "{report}"
    );
    let safe = stdout(&diff(&route, &transition));
    assert!(
        safe.contains("policy payments: safe: the previous recipe is named"),
        "{safe}"
    );
    // A rollback to the bare old configuration strands the new records.
    assert!(!diff(&transition, &route).status.success());
    let broken = write("broken.json", r#", "scope": "sideways""#);
    let refused = diff(&route, &broken);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("broken.json"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--actor-source` gives the delegated principal's scope, the filter's under
/// `identity.delegation: subject_and_actor`, and it is neither the subject's nor the actor's.
#[test]
fn fingerprint_prints_the_delegated_principals_scope() {
    let scope_line = |extra: &[&str]| {
        let output = Command::new(BIN)
            .args([
                "fingerprint",
                "--method",
                "POST",
                "--path",
                "/payments",
                "--authority",
                "api.example.com",
                "--key",
                "key-1",
                "--header",
                "x-user: alice",
                "--header",
                "x-actor: checkout-bff",
            ])
            .args(extra)
            .output()
            .unwrap();
        let text = stdout(&output);
        let line = text
            .lines()
            .find(|line| line.starts_with("scope:"))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned();
        (line, text)
    };
    let (delegated, text) = scope_line(&[
        "--principal-source",
        "header:x-user",
        "--actor-source",
        "header:x-actor",
    ]);
    assert!(
        text.contains("alice (from header:x-user) acted for by checkout-bff (from header:x-actor)"),
        "{text}"
    );
    let headers: Vec<(String, Vec<u8>)> = [
        (":method", "POST"),
        (":path", "/payments"),
        (":authority", "api.example.com"),
        ("idempotency-key", "key-1"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect();
    let names = ["if-match".to_owned(), "x-approval-digest".to_owned()];
    let rules = Rules {
        key_header: "idempotency-key",
        fingerprint_headers: &names,
    };
    let head =
        RequestHead::read(Target::from_headers(&headers).unwrap(), &headers, &rules).unwrap();
    let user = PrincipalSource::Header("x-user".into());
    let actor = PrincipalSource::Header("x-actor".into());
    let expected = head
        .identify(
            Principal::Delegated {
                subject: Party {
                    source: &user,
                    name: "alice",
                },
                actor: Party {
                    source: &actor,
                    name: "checkout-bff",
                },
            },
            ScopeMode::Route,
            b"",
        )
        .scope
        .unwrap();
    assert_eq!(delegated, format!("scope:            {expected}"));
    let (subject, _) = scope_line(&["--principal-source", "header:x-user"]);
    let (acting, _) = scope_line(&["--principal-source", "header:x-actor"]);
    assert_ne!(delegated, subject);
    assert_ne!(delegated, acting);
}

/// `keyflight openapi-overlay` writes the overlay to standard output and lists each guarded
/// operation on standard error; a configuration it cannot read is named in the failure.
#[test]
fn openapi_overlay_writes_the_overlay_and_names_the_guarded_operations() {
    let dir = std::env::temp_dir().join(format!("openapi-overlay-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let openapi = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/openapi/petstore-expanded.yaml"
    );
    let config = dir.join("plugin.json");
    std::fs::write(
        &config,
        r#"{"lease_store": {"cluster": "ls"},
            "policies": [{"name": "pets", "match": {"methods": ["POST"], "path_prefix": "/v2/pets"}}]}"#,
    )
    .unwrap();
    let run = |config: &std::path::Path| {
        Command::new(BIN)
            .args(["openapi-overlay", "--openapi", openapi, "--plugin-config"])
            .arg(config)
            .output()
            .unwrap()
    };
    let output = run(&config);
    let overlay = stdout(&output);
    assert!(overlay.starts_with("overlay: 1.0.0\n"), "{overlay}");
    assert!(
        overlay.contains("- target: $['paths']['/pets']['post']"),
        "{overlay}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim(),
        "guarded: POST /pets (policy pets, matched as /v2/pets)"
    );
    let broken = dir.join("broken.json");
    std::fs::write(
        &broken,
        r#"{"lease_store": {"cluster": "ls"}, "policies": [{}]}"#,
    )
    .unwrap();
    let refused = run(&broken);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("broken.json"));
    std::fs::remove_dir_all(&dir).unwrap();
}
