//! The operator CLI against a running store (L6) and `lease-store fingerprint` (K5).

#![allow(clippy::unwrap_used)]

mod http_support;

use std::process::{Command, Output};

use http_support::*;
use keyflight_protocol::fingerprint::{FingerprintInput, fingerprint};

fn records(server: &Server, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("records")
        .args(args)
        .env("KEYFLIGHT_URL", &server.api.base)
        .env("KEYFLIGHT_ADMIN_TOKEN", ADMIN)
        .env_remove("KEYFLIGHT_ADMIN_TOKEN_FILE")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[tokio::test]
async fn records_commands_show_list_and_erase_through_the_admin_api() {
    let server = start_server(&[]).await;
    let (scope, _, claim_id) = server.api.win("cli").await;
    server.api.finalize(&scope, &claim_id).await;

    let list = stdout(&records(
        &server,
        &["list", "--state", "completed", "--limit", "1000"],
    ));
    assert!(list.starts_with("SCOPE") && list.contains(&scope), "{list}");
    let show = stdout(&records(&server, &["show", &scope]));
    assert!(show.contains("state:            completed"), "{show}");
    assert!(
        show.contains("response status:  201") && show.contains("{\"id\":42}"),
        "{show}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&records(&server, &["show", &scope, "--json"]))).unwrap();
    assert_eq!(json["scope"], scope.as_str());

    let refused = records(&server, &["erase", &scope]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--i-understand-replay-risk"));
    stdout(&records(
        &server,
        &["erase", &scope, "--i-understand-replay-risk"],
    ));
    let gone = records(&server, &["show", &scope]);
    assert!(!gone.status.success());
    let error = String::from_utf8_lossy(&gone.stderr);
    assert!(
        error.contains("not_found"),
        "a problem answer becomes one error line: {error}"
    );
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
            "--principal",
            "alice",
            "--authority",
            "api.example.com",
        ])
        .output()
        .unwrap();
    let text = stdout(&output);
    let expected = fingerprint(&FingerprintInput {
        method: "POST",
        path_and_query: "/payments?b=2&a=1",
        content_type: Some("application/json"),
        body: b"{\"b\": 1, \"a\": 1.0}",
        selected_headers: &[
            ("if-match", Some(b"\"v1\"".as_slice())),
            ("x-approval-digest", None),
        ],
    });
    assert!(
        text.contains(&format!("fingerprint:      {expected}")),
        "{text}"
    );
    assert!(
        text.contains("canonical body:   {\"a\":1,\"b\":1}"),
        "{text}"
    );
    assert!(text.contains("query:            a=1"), "{text}");
    assert!(text.contains("scope:            sha256:"), "{text}");
    assert!(
        !text.contains("x-request-id"),
        "transport headers never count: {text}"
    );
}
