//! Start-up checks and graceful shutdown of `lease-store serve` (L7, L8).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_testkit::process::{ChildGuard, Signal, free_port};

/// Runs `serve` with `tokens` and returns its exit status and stderr; it must exit by itself.
fn serve_expecting_exit(tokens: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut command = serve_command("postgres://127.0.0.1:1/none", free_port(), &[]);
    command
        .env_remove("KEYFLIGHT_TOKEN")
        .env_remove("KEYFLIGHT_ADMIN_TOKEN");
    for (name, value) in tokens {
        command.env(name, value);
    }
    let mut child = ChildGuard::spawn("lease-store", command);
    let status = child.wait_exit(Duration::from_secs(10));
    (status, child.log())
}

#[test]
fn serve_refuses_to_start_without_a_token() {
    let (status, log) = serve_expecting_exit(&[]);
    assert!(!status.success());
    assert!(log.contains("no caller credential configured"), "{log}");
    assert_eq!(log.trim().lines().count(), 1, "one clear line: {log}");
}

#[test]
fn serve_refuses_an_admin_token_equal_to_the_filter_token() {
    let (status, log) = serve_expecting_exit(&[
        ("KEYFLIGHT_TOKEN", "same"),
        ("KEYFLIGHT_ADMIN_TOKEN", "same"),
    ]);
    assert!(!status.success());
    assert!(log.contains("must differ"), "{log}");
}

#[test]
fn serve_reads_tokens_from_files() {
    let path = std::env::temp_dir().join(format!("keyflight-token-{}", std::process::id()));
    std::fs::write(&path, "").unwrap();
    let (status, log) = serve_expecting_exit(&[("KEYFLIGHT_TOKEN_FILE", path.to_str().unwrap())]);
    std::fs::remove_file(&path).unwrap();
    assert!(!status.success());
    assert!(log.contains("no token in the file"), "{log}");
}

#[tokio::test]
async fn sigterm_drains_a_long_poll_and_exits_zero() {
    let mut server = start_server(&[]).await;
    let (scope, fingerprint, _) = server.api.win("shutdown").await;
    let follower = tokio::spawn({
        let api = server.api.clone();
        async move { api.claim(&scope, &fingerprint, 30_000).await }
    });
    server
        .api
        .wait_counter("keyflight_store_events_total{event=\"follower_wait\"}", 1)
        .await;
    assert!(!follower.is_finished());

    let signalled = Instant::now();
    server.child.signal(Signal::Term);
    let answer = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the long-poll was not drained")
        .unwrap();
    assert_eq!(answer.outcome(), "in_progress");
    let status = server.child.wait_exit(Duration::from_secs(10));
    println!("drained and exited {:?} after SIGTERM", signalled.elapsed());
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        server.child.log_tail()
    );
    assert!(server.child.log().contains("shutting down"));
}
