//! The database roles through the binary (`docs/threat-model.md#the-database-roles`): the
//! owner runs `migrate --grant-runtime`; `serve --require-least-privilege` refuses to start as
//! the owner and serves every call as the runtime role; without the flag an over-privileged
//! role is a warning at start.

use std::time::Duration;

use keyflight_testkit::process::{ChildGuard, free_port};
use reqwest::Method;
use uuid::Uuid;

use crate::support::*;

/// A fresh database with a schema owned by a new owner role, and a new runtime role, on the
/// binary's cluster; returns the (owner, runtime) URLs and the runtime role's name.
async fn role_split() -> (String, String, String) {
    let tag = Uuid::now_v7().simple().to_string();
    let (owner, runtime, database) = (
        format!("kf_owner_{tag}"),
        format!("kf_app_{tag}"),
        format!("kf_{tag}"),
    );
    let cluster = cluster();
    cluster.psql(&format!("CREATE ROLE {owner} LOGIN"));
    cluster.psql(&format!("CREATE ROLE {runtime} LOGIN"));
    cluster.psql(&format!("CREATE DATABASE {database}"));
    let url_as = |role: &str| format!("postgres://{role}@127.0.0.1:{}/{database}", cluster.port());
    let (client, connection) = tokio_postgres::connect(&url_as("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "CREATE SCHEMA keyflight AUTHORIZATION {owner};
             ALTER ROLE {owner} IN DATABASE {database} SET search_path = keyflight;
             ALTER ROLE {runtime} IN DATABASE {database} SET search_path = keyflight;"
        ))
        .await
        .unwrap();
    (url_as(&owner), url_as(&runtime), runtime)
}

#[tokio::test]
async fn serve_refuses_the_owner_and_serves_as_the_granted_runtime_role() {
    let (owner_url, runtime_url, runtime) = role_split().await;
    let migrated = bin_command("migrate", &owner_url)
        .args(["--grant-runtime", &runtime])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&migrated.stdout);
    assert!(
        migrated.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    assert!(
        stdout.contains(&format!("granted the runtime role {runtime}")),
        "{stdout}"
    );

    let port = free_port();
    let mut as_owner = ChildGuard::spawn(
        "lease-store as the owner",
        serve_command(&owner_url, port, &["--require-least-privilege"]),
    );
    let status = as_owner.wait_exit(Duration::from_secs(30));
    assert!(
        !status.success(),
        "served as the owner:\n{}",
        as_owner.log()
    );
    let log = as_owner.log();
    assert!(log.contains("can do more than serving needs"), "{log}");
    assert!(
        log.contains("may act as the owner of keyflight_records"),
        "{log}"
    );

    let server = start_server_on(&runtime_url, &["--require-least-privilege"]).await;
    let (api, admin) = (&server.api, &server.admin);
    let (scope, fingerprint, claim_id) = api.win("runtime-role").await;
    api.finalize(&scope, &claim_id).await;
    assert_eq!(
        api.claim(&scope, &fingerprint, 0).await.outcome(),
        "completed"
    );
    let epoch_before = api.get("/v1/epoch", Some(TOKEN)).await;
    assert_eq!(epoch_before.status, 200, "{}", epoch_before.text);
    let erased = admin
        .send(
            Method::DELETE,
            &format!("/v1/records/{scope}?reason=DSR-7"),
            Some(ADMIN),
            |r| r.header("keyflight-ack-replay-risk", "true"),
        )
        .await;
    assert_eq!(erased.status, 200, "{}", erased.text);
    let epoch_after = api.get("/v1/epoch", Some(TOKEN)).await;
    assert!(
        epoch_after.json["epoch"].as_u64() > epoch_before.json["epoch"].as_u64(),
        "{} then {}",
        epoch_before.text,
        epoch_after.text
    );
    assert!(
        server
            .child
            .log()
            .contains("the database role has the runtime role's rights and no more"),
        "{}",
        server.child.log()
    );
}

#[tokio::test]
async fn without_the_flag_an_over_privileged_role_is_a_warning() {
    let server = start_server(&[]).await;
    let log = server.child.log();
    assert!(
        log.lines()
            .any(|line| line.contains("WARN") && line.contains("is a superuser")),
        "{log}"
    );
}
