//! The router's connections to its partitions (`docs/distributed-sql.md#least-privilege`):
//! they check the partitions' certificates as the store's own partition URLs ask, and they
//! carry no one's credentials but the role the stores run as.

use crate::support::*;
use keyflight_lease_store::store::{RuntimeRole, Store, StoreSettings, migrate_partitioned};
use keyflight_testkit::pg::{PgCluster, PgOptions};

/// A router over two partitions that take TCP connections over TLS only.
struct OverTls {
    router: PgCluster,
    partitions: Vec<PgCluster>,
}

impl OverTls {
    fn start() -> OverTls {
        let tls = PgOptions {
            tls: true,
            ..PgOptions::default()
        };
        OverTls {
            router: PgCluster::start(),
            partitions: (0..2).map(|_| PgCluster::start_with(tls)).collect(),
        }
    }

    /// Each partition's URL for `role`, verifying the partition's certificate.
    fn partition_urls(&self, role: &str) -> Vec<String> {
        self.partitions
            .iter()
            .map(|p| {
                format!(
                    "{}?sslmode=verify-full&sslrootcert={}",
                    as_role(&p.url(), role),
                    p.tls().ca().display()
                )
            })
            .collect()
    }

    async fn store_as(&self, role: &str) -> Store {
        Store::connect(&StoreSettings {
            partitions: self.partition_urls(role),
            ..settings(&as_role(&self.router.url(), role))
        })
        .await
        .unwrap()
    }
}

fn as_role(url: &str, role: &str) -> String {
    url.replacen("postgres@", &format!("{role}@"), 1)
}

/// The slot map's connection strings, one per slot.
async fn slot_connstrs(router: &PgCluster) -> Vec<String> {
    raw_client(&router.url())
        .await
        .query(
            "SELECT option FROM pg_foreign_server, unnest(srvoptions) AS option \
              WHERE srvname = 'keyflight_partitions' AND option ~ '^p[0-9]+='",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The roles the router maps to the partitions (`public` for a mapping for everyone).
async fn mapped_roles(router: &PgCluster) -> Vec<String> {
    raw_client(&router.url())
        .await
        .query(
            "SELECT usename::text FROM pg_user_mappings \
              WHERE srvname = 'keyflight_partitions' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Without `--grant-runtime` the router still verifies the partitions, and maps only the
/// owner that installed it: another role on the router (even one granted the slot map) does
/// not reach the partitions with the owner's credentials.
#[tokio::test]
async fn the_router_verifies_the_partitions_and_maps_only_its_owner() {
    let db = OverTls::start();
    migrate_partitioned(&db.router.url(), &db.partition_urls("postgres"), None)
        .await
        .unwrap();
    let connstrs = slot_connstrs(&db.router).await;
    assert_eq!(connstrs.len(), 64, "{connstrs:?}");
    for connstr in &connstrs {
        assert!(connstr.contains("sslmode=verify-full"), "{connstr}");
        let ca = db
            .partitions
            .iter()
            .map(|p| p.tls().ca().display().to_string())
            .find(|ca| connstr.contains(ca.as_str()));
        assert!(ca.is_some(), "{connstr} names its partition's CA");
    }
    assert_eq!(mapped_roles(&db.router).await, ["postgres"]);
    // A router installed before it was told how to check its partitions is told on the next
    // migrate, its slot map kept.
    let (slot, untold) = connstrs[5].split_once('=').unwrap();
    let untold = untold.split(" sslmode=").next().unwrap();
    db.router.psql(&format!(
        "ALTER SERVER keyflight_partitions OPTIONS (SET {slot} '{untold}')"
    ));
    assert!(!slot_connstrs(&db.router).await[5].contains("sslmode"));
    migrate_partitioned(&db.router.url(), &db.partition_urls("postgres"), None)
        .await
        .unwrap();
    assert_eq!(slot_connstrs(&db.router).await, connstrs);

    let store = db.store_as("postgres").await;
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim_req(fingerprint("tls"), 30_000)).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();

    db.router.psql(
        "CREATE ROLE intruder LOGIN; \
         GRANT USAGE ON FOREIGN SERVER keyflight_partitions TO intruder",
    );
    let intruder = raw_client(&as_role(&db.router.url(), "intruder")).await;
    let refused = intruder
        .query("SELECT * FROM keyflight_read($1)", &[&scope.0.as_slice()])
        .await;
    assert!(
        refused.is_err(),
        "a role on the router read a partition as the owner: {refused:?}"
    );
}

/// With `--grant-runtime` the runtime role serves through the router over verified TLS, and
/// what the router runs for it on a partition has its rights, not the owner's.
#[tokio::test]
async fn the_runtime_role_reaches_the_partitions_with_its_own_rights_only() {
    let db = OverTls::start();
    for cluster in std::iter::once(&db.router).chain(&db.partitions) {
        cluster.psql("CREATE ROLE keyflight_app LOGIN");
    }
    let runtime = RuntimeRole {
        role: "keyflight_app".into(),
        password: None,
    };
    migrate_partitioned(
        &db.router.url(),
        &db.partition_urls("postgres"),
        Some(&runtime),
    )
    .await
    .unwrap();
    assert!(
        slot_connstrs(&db.router)
            .await
            .iter()
            .all(|connstr| connstr.contains("sslmode=verify-full"))
    );
    assert_eq!(mapped_roles(&db.router).await, ["keyflight_app"]);

    let store = db.store_as("keyflight_app").await;
    let scope = fresh_scope();
    let req = claim_req(fingerprint("runtime over tls"), 30_000);
    let (claim_id, _, _) = must_win(&store, &scope, &req).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();

    // Only a superuser may read pg_authid: through the router, the runtime role may not.
    db.router.psql(
        "CREATE FUNCTION count_roles() RETURNS bigint LANGUAGE plproxy AS $$ \
           CLUSTER 'keyflight_partitions'; RUN ON 0; SELECT count(*) FROM pg_authid; $$; \
         GRANT EXECUTE ON FUNCTION count_roles() TO keyflight_app",
    );
    let app = raw_client(&as_role(&db.router.url(), "keyflight_app")).await;
    let denied = app
        .query_one("SELECT count_roles()", &[])
        .await
        .unwrap_err();
    assert!(
        denied.to_string().contains("pg_authid")
            || denied
                .as_db_error()
                .is_some_and(|e| e.message().contains("pg_authid")),
        "{denied:?}"
    );
}
