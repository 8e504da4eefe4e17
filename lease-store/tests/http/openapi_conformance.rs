//! L8: the lease-store under schemathesis, against its own `/openapi.json`.
//!
//! Schemathesis (PyPI) generates requests from the document — valid ones,
//! invalid ones, boundary values, and chains that follow the document's
//! links (claim → finalize/renew/release, record → resolve/erase) — and runs
//! every check it has: no 5xx, every status code, content type, header and
//! body as documented, valid input accepted, invalid input refused, auth not
//! ignored, wrong methods answered 405 with `Allow`.
//!
//! It needs the schemathesis CLI, which `scripts/api-conformance.sh` (make
//! api-conformance, part of make test) installs into `.tools/venv` and passes
//! in `KEYFLIGHT_SCHEMATHESIS`; plain `cargo test` skips this file's test as
//! ignored. `KEYFLIGHT_SCHEMATHESIS_EXAMPLES` (default 100) and
//! `KEYFLIGHT_SCHEMATHESIS_SEED` (default 1: CI replays the same cases) tune
//! the run.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use crate::support::*;

#[tokio::test]
#[ignore = "needs the schemathesis CLI: run `make api-conformance`"]
async fn the_api_answers_as_its_openapi_document_says() {
    let schemathesis = std::env::var("KEYFLIGHT_SCHEMATHESIS")
        .expect("KEYFLIGHT_SCHEMATHESIS must name the schemathesis CLI (make api-conformance)");
    let examples =
        std::env::var("KEYFLIGHT_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "100".into());
    let seed = std::env::var("KEYFLIGHT_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".into());
    // A short --max-wait: generated claims repeat scopes and fingerprints, and
    // each same-fingerprint follower would otherwise long-poll for 30 s.
    let server = start_server(&["--max-wait", "200ms"]).await;
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/schemathesis/schemathesis.toml"
    );
    // Its reports and its cache of past failures go to a scratch directory,
    // never into the source tree.
    // Cross-field rules JSON Schema cannot state (the file says which).
    let hooks = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis/hooks.py");
    let report =
        std::env::temp_dir().join(format!("keyflight-schemathesis-{}", std::process::id()));
    std::fs::create_dir_all(&report).unwrap();

    // The document describes both listeners: the data plane's calls are run against
    // the data-plane listener, the records API against the admin listener.
    let url = format!("{}/openapi.json", server.api.base);
    let passes = [
        (server.api.base.clone(), "--exclude-path-regex"),
        (server.admin.base.clone(), "--include-path-regex"),
    ];
    for (base, filter) in passes {
        let output = tokio::task::spawn_blocking({
            let (schemathesis, url, report) = (schemathesis.clone(), url.clone(), report.clone());
            let base = base.clone();
            let (examples, seed) = (examples.clone(), seed.clone());
            move || {
                Command::new(schemathesis)
                    .current_dir(&report)
                    .args(["--no-color", "--config-file", config, "run", &url])
                    .args(["--url", &base, filter, "^/v1/records"])
                    .args([
                        "--checks",
                        "all",
                        "--workers",
                        "1",
                        "--request-timeout",
                        "10",
                    ])
                    .args(["--max-examples", &examples, "--seed", &seed])
                    .arg("--report-dir")
                    .arg(&report)
                    .env("SCHEMATHESIS_HOOKS", hooks)
                    .env("KEYFLIGHT_ST_FILTER_TOKEN", TOKEN)
                    .env("KEYFLIGHT_ST_ADMIN_TOKEN", ADMIN)
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();

        let stdout = String::from_utf8_lossy(&output.stdout);
        println!("{stdout}");
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        assert!(
            output.status.success(),
            "schemathesis found failures (above) on {base}; lease-store log at {}",
            server.child.log_path().display()
        );
        assert!(
            stdout.contains("Stateful") && !stdout.contains("0 covered"),
            "the stateful phase ran and followed the document's links"
        );
    }
    let _ = std::fs::remove_dir_all(report);
}
