//! TLS from the lease-store to Postgres (`docs/configuration.md#tls-to-postgres`): a server
//! that takes TCP connections over TLS only (`hostssl`), with a CA made for the run. Under
//! `verify-full` all three connection paths work (migrations, the pool, the `LISTEN`
//! connection that wakes long-polls); a wrong CA, a wrong host name and cleartext are
//! refused with an error that says why (cleartext by `serve` itself, before it connects); client certificates and channel binding work.

use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

use keyflight_testkit::pg::{PgCluster, PgOptions, PgTls};
use keyflight_testkit::process::{ChildGuard, eventually, free_port};

use crate::support::*;

/// The SCRAM role's password.
const SCRAM_PASSWORD: &str = "scram-password-for-tests";

/// One TLS-only cluster for this module, with the roles its `pg_hba.conf` names.
fn tls_cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = PgCluster::start_with(PgOptions {
            tls: true,
            ..PgOptions::default()
        });
        let cert = PgTls::CERT_USER;
        let scram = PgTls::SCRAM_USER;
        cluster.psql(&format!("CREATE ROLE {cert} LOGIN"));
        cluster.psql(&format!("CREATE DATABASE {cert} OWNER {cert}"));
        cluster.psql(&format!(
            "CREATE ROLE {scram} LOGIN PASSWORD '{SCRAM_PASSWORD}'"
        ));
        cluster.psql(&format!("CREATE DATABASE {scram} OWNER {scram}"));
        cluster
    })
}

/// `postgres://user[:password]@host:port/db?query` on the TLS cluster; the database is the
/// role's own (`postgres` for the superuser).
fn url(user: &str, host: &str, query: &str) -> String {
    let db = user.split(':').next().unwrap_or(user);
    format!(
        "postgres://{user}@{host}:{}/{db}?{query}",
        tls_cluster().port()
    )
}

/// `sslmode=verify-full` against `ca`.
fn verify_full(ca: &std::path::Path) -> String {
    format!("sslmode=verify-full&sslrootcert={}", ca.display())
}

/// Runs `lease-store migrate` against `url`.
fn migrate_output(url: &str) -> Output {
    bin_command("migrate", url).output().unwrap()
}

/// Asserts `lease-store migrate` failed and its one error line contains every `needle`.
fn assert_migrate_refused(url: &str, needles: &[&str]) {
    let output = migrate_output(url);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "migrate connected: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "the error does not say `{needle}`: {stderr}"
        );
    }
    println!("refused as expected: {stderr}");
}

#[tokio::test]
async fn verify_full_carries_migrations_claims_and_long_poll_wake_ups() {
    let url = url(
        "postgres",
        "127.0.0.1",
        &verify_full(&tls_cluster().tls().ca()),
    );
    // Migrations (serve --migrate), then the pool and the LISTEN connection of two replicas.
    let replica_1 = start_server_on(&url, &["--migrate"]).await;
    let replica_2 = start_server_on(&url, &[]).await;
    assert_long_poll_woken_across(&replica_1.api, &replica_2.api).await;
    // Both replicas' LISTEN connections and their pools are TLS sessions.
    let plain_and_tls = tls_cluster().psql(
        "SELECT count(*) FILTER (WHERE NOT s.ssl) || ' ' || \
                count(*) FILTER (WHERE s.ssl AND a.application_name = 'keyflight-lease-store-listen') \
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.application_name LIKE 'keyflight-lease-store%'",
    );
    assert_eq!(plain_and_tls.trim(), "0 2", "(cleartext, TLS listeners)");
}

#[tokio::test]
async fn a_wrong_ca_refuses_every_connection_path() {
    let url = url(
        "postgres",
        "127.0.0.1",
        &verify_full(&tls_cluster().tls().other_ca()),
    );
    assert_migrate_refused(&url, &["invalid peer certificate", "UnknownIssuer"]);
    // The pool (/readyz) and the LISTEN connection say the same in the service's log.
    let port = free_port();
    let server = ChildGuard::spawn("lease-store", serve_command(&url, port, &[]));
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    eventually(
        "/readyz refused and both paths logged the certificate error",
        Duration::from_secs(20),
        || async {
            let ready = reqwest::get(&readyz).await.map(|r| r.status().as_u16());
            let log = server.log();
            matches!(ready, Ok(503))
                && log.matches("UnknownIssuer").count() >= 2
                && log.contains("long-poll LISTEN connection lost")
        },
    )
    .await;
}

#[tokio::test]
async fn a_wrong_host_name_is_refused_under_verify_full_only() {
    let ca = tls_cluster().tls().ca();
    // The server's certificate names 127.0.0.1, not localhost (which reaches the same server).
    assert_migrate_refused(
        &url("postgres", "localhost", &verify_full(&ca)),
        &["invalid peer certificate", "not valid for name"],
    );
    let verify_ca = format!("sslmode=verify-ca&sslrootcert={}", ca.display());
    let output = migrate_output(&url("postgres", "localhost", &verify_ca));
    assert!(
        output.status.success(),
        "verify-ca checks no host name: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn cleartext_is_refused_by_a_hostssl_only_server() {
    assert_migrate_refused(
        &url("postgres", "127.0.0.1", "sslmode=disable"),
        &["no pg_hba.conf entry", "no encryption"],
    );
}

#[test]
fn serve_refuses_a_database_url_that_may_run_in_cleartext() {
    let url = url("postgres", "127.0.0.1", "sslmode=prefer");
    let output = serve_command(&url, free_port(), &[])
        .env_remove("KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "serve started: {stderr}");
    assert!(
        stderr.contains("sslmode=prefer") && stderr.contains("KEYFLIGHT_ALLOW_PLAINTEXT_DATABASE"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_client_certificate_logs_in_and_serves() {
    let tls = tls_cluster().tls();
    let user = PgTls::CERT_USER;
    let without_cert = url(user, "127.0.0.1", &verify_full(&tls.ca()));
    assert_migrate_refused(&without_cert, &["certificate"]);
    let with_cert = format!(
        "{without_cert}&sslcert={}&sslkey={}",
        tls.client().cert.display(),
        tls.client().key.display()
    );
    let server = start_server_on(&with_cert, &["--migrate"]).await;
    let (scope, _, claim_id) = server.api.win("tls-client-cert").await;
    server.api.finalize(&scope, &claim_id).await;
}

#[tokio::test]
async fn channel_binding_can_be_required() {
    let ca = tls_cluster().tls().ca();
    let user = format!("{}:{SCRAM_PASSWORD}", PgTls::SCRAM_USER);
    let bound = url(
        &user,
        "127.0.0.1",
        &format!("{}&channel_binding=require", verify_full(&ca)),
    );
    let output = migrate_output(&bound);
    assert!(
        output.status.success(),
        "SCRAM-SHA-256-PLUS over rustls: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
