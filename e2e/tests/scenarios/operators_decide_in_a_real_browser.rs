//! The operator's console in a real headless Chromium (`docs/console.md#the-browser-test`):
//! two payments time out through Envoy under `uncertain: hold` and are `unknown`; a Node
//! script driving Chromium (`e2e/browser/console.mjs`, playwright-core) signs in, resolves
//! one with an answer it authors, erases the other, and opens a record whose recorded body
//! and headers are hostile, asserting nothing of it ran. Then, through Envoy, the retry of
//! the first replays the authored answer and the retry of the second runs again; the audit
//! holds both decisions under the operator's name.
//!
//! Needs Debian's chromium and playwright-core in `.tools/browser`, so it is ignored by
//! default: `make console-browser` installs both and runs it alone. Run without them, it
//! fails, saying so in one line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use keyflight_e2e::{Stack, StackOptions};
use keyflight_protocol::Digest;
use keyflight_testkit::envoy_variants::EnvoyEdit;
use keyflight_testkit::stack::ADMIN_TOKEN;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Envoy gives up on the upstream after this; the upstream takes longer.
const ROUTE_TIMEOUT: Duration = Duration::from_millis(300);
const SLOW_PATH: &str = "/payments?delay_ms=1500";
/// The hostile record's recorded body (`console.mjs` asserts how it is shown).
const HOSTILE_BODY: &str = "<script>window.keyflightPwned = 1; alert(1)</script>\
                            <a href=\"javascript:alert(2)\">pay</a><img src=x onerror=alert(3)>\
                            \u{202e}gnp.exe\u{2028}next";

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ is in the workspace")
        .to_path_buf()
}

/// Where playwright-core is installed, after checking both prerequisites are.
fn prerequisites() -> PathBuf {
    let tools = root().join(".tools/browser");
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: `make console-browser-prereqs` installs it"
    );
    assert!(
        tools
            .join("node_modules/playwright-core/package.json")
            .exists(),
        "playwright-core is missing from .tools/browser: `make console-browser-prereqs` installs it"
    );
    tools
}

/// The scope of the one `unknown` record not in `known`.
async fn new_unknown(stack: &Stack, known: &[String]) -> String {
    let listed: Value = serde_json::from_str(
        &stack
            .records_cli(&["--json", "list", "--state", "unknown"])
            .await,
    )
    .expect("records list --json prints JSON");
    let scopes: Vec<String> = listed["records"]
        .as_array()
        .expect("a record list")
        .iter()
        .filter_map(|record| record["scope"].as_str().map(str::to_owned))
        .filter(|scope| !known.contains(scope))
        .collect();
    assert_eq!(scopes.len(), 1, "{listed}");
    scopes[0].clone()
}

/// Records a hostile answer straight at the lease-store (claim, finalize), as a filter
/// would for an upstream that answered it; returns its scope.
async fn hostile_record(stack: &Stack) -> String {
    let parts = stack.parts();
    let base = format!("http://{}:{}", parts.store_ip(0), parts.store_port(0));
    let token = parts.options().filter_token();
    let scope = Digest::of(format!("console-hostile/{}", std::process::id()).as_bytes()).to_hex();
    let client = reqwest::Client::new();
    let claim: Value = client
        .post(format!("{base}/v1/claims/{scope}"))
        .bearer_auth(&token)
        .json(&json!({ "fingerprint": Digest::of(b"hostile").to_hex(), "lease_ms": 60_000 }))
        .send()
        .await
        .and_then(|response| response.error_for_status())
        .expect("the claim")
        .json()
        .await
        .expect("a claim answer");
    assert_eq!(claim["outcome"], "won", "{claim}");
    let response = json!({
        "status": 200,
        "headers": [
            ["content-type", "text/html"],
            ["x-note", "<script>alert(4)</script>"],
            ["link", "<javascript:alert(5)>; rel=\"next\""],
        ],
        "body_b64": base64::engine::general_purpose::STANDARD.encode(HOSTILE_BODY),
    });
    client
        .post(format!("{base}/v1/claims/{scope}/finalize"))
        .bearer_auth(&token)
        .json(&json!({ "claim_id": claim["claim_id"], "response": response, "replayable": true }))
        .send()
        .await
        .and_then(|response| response.error_for_status())
        .expect("the finalize");
    scope
}

/// The audit rows about `scope`: `actor|action|reason` lines.
fn audit(stack: &Stack, scope: &str) -> String {
    stack.sql(&format!(
        "SELECT actor, action, reason FROM keyflight_operator_audit \
         WHERE scope = '\\x{scope}'::bytea ORDER BY id"
    ))
}

#[tokio::test]
#[ignore = "needs chromium and playwright-core: run `make console-browser`"]
async fn an_operator_decides_in_a_real_browser() {
    let tools = prerequisites();
    let stack = Stack::start(
        StackOptions::default()
            .envoy(EnvoyEdit::RouteTimeout(ROUTE_TIMEOUT))
            .policy(|policy| {
                policy.insert("uncertain".into(), json!("hold"));
            }),
    )
    .await;
    let body = json!({"amount": 7});
    let timed_out = |key: &'static str| stack.post(SLOW_PATH).key(key).json(&body).send();
    assert_eq!(timed_out("browser-resolve").await.status, 504);
    let resolve = new_unknown(&stack, &[]).await;
    assert_eq!(timed_out("browser-erase").await.status, 504);
    let erase = new_unknown(&stack, std::slice::from_ref(&resolve)).await;
    let hostile = hostile_record(&stack).await;

    let console = format!(
        "http://{}:{}",
        stack.parts().store_ip(0),
        stack.parts().store_admin_port(0)
    );
    let screenshot = root().join("target/console/record.png");
    std::fs::create_dir_all(screenshot.parent().expect("a folder")).expect("target/console");
    let run = tokio::process::Command::new("node")
        .arg(root().join("e2e/browser/console.mjs"))
        .args([&console, ADMIN_TOKEN, &resolve, &erase, &hostile])
        .arg(&screenshot)
        .env("KEYFLIGHT_PLAYWRIGHT_DIR", &tools)
        .output()
        .await
        .expect("run node");
    assert!(
        run.status.success(),
        "the browser script failed ({}): {}{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let said: Value = serde_json::from_slice(&run.stdout).expect("the script prints JSON");
    let authored = &said["authored"];

    // The resolved payment's retry replays what the operator authored in the browser.
    let replay = timed_out("browser-resolve").await;
    assert_eq!(
        u64::from(replay.status),
        authored["status"].as_u64().expect("a status"),
        "{replay}"
    );
    replay.assert_replayed();
    assert_eq!(
        replay.text(),
        authored["body"].as_str().expect("a body"),
        "{replay}"
    );
    // The erased one runs again (and times out again), rather than 409 operation_unknown.
    assert_eq!(timed_out("browser-erase").await.status, 504);
    assert_eq!(stack.upstream_executions().await, 3);

    assert_eq!(
        audit(&stack, &resolve),
        "admin|resolve_completed|browser: the payment settled\n"
    );
    assert_eq!(
        audit(&stack, &erase),
        "admin|erase|browser: never charged, run it again\n"
    );
    assert!(screenshot.exists(), "{}", screenshot.display());
}
