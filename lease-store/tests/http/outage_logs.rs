//! During an outage every call fails the same way: the warning is rate-limited (one line per
//! kind per second, with how many were suppressed) while the counters stay exact.

use keyflight_testkit::pg::PgCluster;

use crate::support::{fresh_digest, start_server_on};

/// Calls sent while the database is down.
const CALLS: u64 = 60;

#[tokio::test]
async fn an_outage_logs_a_few_lines_and_counts_every_failure() {
    let cluster = PgCluster::start();
    let server = start_server_on(&cluster.url(), &["--migrate", "--statement-timeout", "1s"]).await;
    let api = &server.api;
    cluster.stop();
    let started = std::time::Instant::now();
    for _ in 0..CALLS {
        api.claim(&fresh_digest("outage"), &fresh_digest("fp"), 0)
            .await
            .assert_problem(503, "journal_unavailable");
    }
    let seconds = started.elapsed().as_secs();
    assert_eq!(
        api.counter("keyflight_store_errors_total{code=\"journal_unavailable\"}")
            .await,
        CALLS,
        "every failure is counted"
    );
    let lines = server
        .child
        .log()
        .lines()
        .filter(|line| line.contains("database unavailable"))
        .count() as u64;
    assert!(
        lines <= seconds + 2,
        "{lines} warnings for {CALLS} failures in {seconds} s"
    );
    assert!(lines >= 1, "the outage is logged");
}
