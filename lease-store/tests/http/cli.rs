//! The operator CLI against a running store (L6).

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

use crate::support::*;

fn records(server: &Server, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("records")
        .args(args)
        .env("KEYFLIGHT_ADMIN_URL", &server.admin.base)
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

    let refused = records(&server, &["erase", &scope, "--reason", "INC-9"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--i-understand-replay-risk"));
    let no_reason = records(&server, &["erase", &scope, "--i-understand-replay-risk"]);
    assert!(!no_reason.status.success());
    assert!(String::from_utf8_lossy(&no_reason.stderr).contains("--reason"));
    stdout(&records(
        &server,
        &[
            "erase",
            &scope,
            "--i-understand-replay-risk",
            "--reason",
            "INC-9 duplicate charge",
        ],
    ));
    assert!(
        server.child.log().contains("INC-9 duplicate charge"),
        "the reason reached the store"
    );
    let gone = records(&server, &["show", &scope]);
    assert!(!gone.status.success());
    let error = String::from_utf8_lossy(&gone.stderr);
    assert!(
        error.contains("not_found"),
        "a problem answer becomes one error line: {error}"
    );
}
