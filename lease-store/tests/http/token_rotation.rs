//! Rotating the filter token with no outage (`docs/configuration.md#caller-identity`):
//! the token file is a set the store re-reads when it changes, so a fleet of filters keeps
//! claiming while the next token is added, the fleet moves to it, and the old one is
//! removed. Every call of the run must be let in, and every claim must be recorded.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keyflight_testkit::process::{eventually, free_port};
use serde_json::json;

use crate::support::*;

const OLD: &str = "token-before-rotation";
const NEW: &str = "token-after-rotation";
/// Filters claiming at once.
const FLEET: usize = 6;

/// Replaces the file whole, as a Kubernetes Secret volume does (write, then rename).
fn install(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// What the fleet currently sends: the token of this phase, and the phase itself.
struct Fleet {
    token: Mutex<(usize, &'static str)>,
    /// The phase each filter's last finished call began in.
    done_in_phase: Vec<AtomicUsize>,
    stop: AtomicBool,
}

impl Fleet {
    fn set(&self, phase: usize, token: &'static str) {
        *self.token.lock().unwrap() = (phase, token);
    }

    fn all_done_in(&self, phase: usize) -> bool {
        self.done_in_phase
            .iter()
            .all(|p| p.load(Ordering::SeqCst) >= phase)
    }
}

/// One filter: claims a fresh scope and finalizes it, over and over, with the fleet's
/// token of the moment; returns the scopes it recorded, or the first refused call.
async fn filter(api: Api, fleet: Arc<Fleet>, index: usize) -> Result<Vec<String>, String> {
    let mut recorded = Vec::new();
    while !fleet.stop.load(Ordering::SeqCst) {
        let (phase, token) = *fleet.token.lock().unwrap();
        let scope = fresh_digest("rotation");
        let claim = api
            .post(
                &format!("/v1/claims/{scope}"),
                Some(token),
                &json!({ "fingerprint": fresh_digest("fp"), "lease_ms": 60_000 }),
            )
            .await;
        if claim.status != 200 || claim.json["outcome"] != "won" {
            return Err(format!(
                "phase {phase} claim: {} {}",
                claim.status, claim.text
            ));
        }
        let finalize = api
            .post(
                &format!("/v1/claims/{scope}/finalize"),
                Some(token),
                &json!({
                    "claim_id": claim.json["claim_id"],
                    "response": sample_response(),
                    "replayable": true,
                }),
            )
            .await;
        if finalize.status != 200 {
            return Err(format!("phase {phase} finalize: {}", finalize.text));
        }
        recorded.push(scope);
        fleet.done_in_phase[index].store(phase, Ordering::SeqCst);
    }
    Ok(recorded)
}

async fn accepted(api: &Api, token: &str) -> bool {
    let answer = api.get("/v1/epoch", Some(token)).await;
    answer.status == 200
}

#[tokio::test]
async fn a_rotation_under_load_refuses_no_call_and_loses_no_record() {
    let dir = std::env::temp_dir().join(format!(
        "keyflight-rotation-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    install(&file, &format!("{OLD}\n"));
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &[]);
    command
        .env_remove("KEYFLIGHT_TOKEN")
        .env("KEYFLIGHT_TOKEN_FILE", &file);
    let server = start_command(command, port).await;
    let api = &server.api;
    assert!(!accepted(api, NEW).await);

    let fleet = Arc::new(Fleet {
        token: Mutex::new((1, OLD)),
        done_in_phase: (0..FLEET).map(|_| AtomicUsize::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    let filters: Vec<_> = (0..FLEET)
        .map(|i| tokio::spawn(filter(api.clone(), Arc::clone(&fleet), i)))
        .collect();
    let within = Duration::from_secs(20);
    eventually("the fleet claims with the old token", within, || async {
        fleet.all_done_in(1)
    })
    .await;

    // 1. The next token is added beside the current one; the store picks it up itself.
    install(&file, &format!("{OLD}\n{NEW}\n"));
    eventually("the next token is accepted", within, || async {
        accepted(api, NEW).await
    })
    .await;
    assert!(accepted(api, OLD).await, "the current one still is");

    // 2. The fleet moves to the next token (a rollout of the filters' Secret).
    fleet.set(2, NEW);
    eventually(
        "every filter claims with the next token",
        within,
        || async { fleet.all_done_in(2) },
    )
    .await;

    // 3. The old token is removed.
    install(&file, &format!("{NEW}\n"));
    eventually("the old token is refused", within, || async {
        !accepted(api, OLD).await
    })
    .await;
    fleet.set(3, NEW);
    eventually("the fleet claims on after the rotation", within, || async {
        fleet.all_done_in(3)
    })
    .await;

    fleet.stop.store(true, Ordering::SeqCst);
    let mut recorded = Vec::new();
    for filter in filters {
        recorded.extend(filter.await.unwrap().expect("no call refused"));
    }
    assert!(recorded.len() >= 3 * FLEET, "{} claims", recorded.len());
    for scope in &recorded {
        let shown = server
            .admin
            .get(&format!("/v1/records/{scope}"), Some(ADMIN))
            .await;
        assert_eq!(shown.status, 200, "{scope}: {}", shown.text);
        assert_eq!(shown.json["state"], "completed", "{scope}");
    }
    println!("{} claims recorded across the rotation", recorded.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_broken_token_file_keeps_the_tokens_it_had() {
    let dir = std::env::temp_dir().join(format!(
        "keyflight-rotation-broken-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    install(&file, &format!("{OLD}\n"));
    let port = free_port();
    let mut command = serve_command(&cluster().url(), port, &[]);
    command
        .env_remove("KEYFLIGHT_TOKEN")
        .env("KEYFLIGHT_TOKEN_FILE", &file);
    let server = start_command(command, port).await;
    // An emptied file (a Secret whose key was dropped) would lock every filter out.
    install(&file, "# nothing here\n");
    eventually(
        "the store says it kept the previous tokens",
        Duration::from_secs(20),
        || async {
            // Each call lets the store notice the change.
            assert!(
                accepted(&server.api, OLD).await,
                "the old token still opens"
            );
            server.child.log().contains("keeping the previous tokens")
        },
    )
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}
