//! F2/L8 over HTTP: with Postgres down the store answers 503 `journal_unavailable`
//! and is not ready; when Postgres returns, it recovers without a restart.
//!
//! One test in this binary, on its own cluster: it stops the database.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::support::*;
use keyflight_testkit::pg::PgCluster;

#[tokio::test]
async fn a_stopped_database_answers_503_and_recovers_after_restart() {
    let cluster = PgCluster::start();
    // A fresh cluster: `serve --migrate` brings its schema up before serving.
    let server = start_server_on(&cluster.url(), &["--migrate", "--statement-timeout", "1s"]).await;
    let api = &server.api;
    let fingerprint = fresh_digest("fp");
    assert_eq!(
        api.claim(&fresh_digest("before"), &fingerprint, 0)
            .await
            .outcome(),
        "won"
    );

    cluster.stop();
    let down = api.claim(&fresh_digest("down"), &fingerprint, 0).await;
    down.assert_problem(503, "journal_unavailable");
    assert_eq!(down.headers.get("retry-after").unwrap(), "1");
    let ready = api.get("/readyz", None).await;
    ready.assert_problem(503, "journal_unavailable");
    assert_eq!(ready.headers.get("retry-after").unwrap(), "1");
    assert_eq!(api.get("/healthz", None).await.status, 200, "still alive");

    cluster.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api.claim(&fresh_digest("after"), &fingerprint, 0).await;
        if answer.status == 200 {
            assert_eq!(answer.outcome(), "won");
            break;
        }
        answer.assert_problem(503, "journal_unavailable");
        assert!(Instant::now() < deadline, "the store never recovered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(api.get("/readyz", None).await.status, 200);
    assert!(
        api.counter("keyflight_store_errors_total{code=\"journal_unavailable\"}")
            .await
            >= 2
    );
}
