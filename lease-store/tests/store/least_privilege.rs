//! Least privilege against a real Postgres (`docs/threat-model.md#the-database-roles`): the
//! runtime role that `migrate --grant-runtime` sets up serves every call, and cannot change
//! the schema, the migration history, the operator epoch, the fence sequence or the audit;
//! `Store::excess_privileges` tells such a role from the owner, a superuser and a role with
//! broader grants.

#![allow(clippy::unwrap_used)]

use keyflight_lease_store::longpoll::{LongPoll, claim_with_wait};
use keyflight_lease_store::store::{Store, grant_runtime, migrate};
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, ReleaseAs, ReleaseRequest, RenewRequest, ResolveAs,
    ResolveRequest, WonHow,
};
use keyflight_testkit::process::eventually;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::support::*;

/// A database set up as `deploy/README.md` says: a schema owned by the owner role, which
/// migrates and grants, and a runtime role, which serves. Roles are per cluster, so every
/// test makes its own, with its own database.
struct RoleSplit {
    owner: String,
    runtime: String,
    database: String,
}

impl RoleSplit {
    /// Makes the roles, the database and the owner's schema, migrates as the owner and
    /// grants the runtime role, as the migration Job does.
    async fn new() -> RoleSplit {
        let tag = Uuid::now_v7().simple().to_string();
        let split = RoleSplit {
            owner: format!("kf_owner_{tag}"),
            runtime: format!("kf_app_{tag}"),
            database: format!("kf_{tag}"),
        };
        let admin = raw_client(&cluster().url()).await;
        for sql in [
            format!("CREATE ROLE {} LOGIN", split.owner),
            format!("CREATE ROLE {} LOGIN", split.runtime),
            format!("CREATE DATABASE {}", split.database),
        ] {
            admin.batch_execute(&sql).await.unwrap();
        }
        let in_database = raw_client(&split.url_as("postgres")).await;
        in_database
            .batch_execute(&format!(
                "CREATE SCHEMA keyflight AUTHORIZATION {owner};
                 ALTER ROLE {owner} IN DATABASE {db} SET search_path = keyflight;
                 ALTER ROLE {runtime} IN DATABASE {db} SET search_path = keyflight;",
                owner = split.owner,
                runtime = split.runtime,
                db = split.database,
            ))
            .await
            .unwrap();
        migrate(&split.owner_url()).await.unwrap();
        grant_runtime(&split.owner_url(), &split.runtime)
            .await
            .unwrap();
        split
    }

    fn url_as(&self, role: &str) -> String {
        format!(
            "postgres://{role}@127.0.0.1:{}/{}?sslmode=disable",
            cluster().port(),
            self.database
        )
    }

    fn owner_url(&self) -> String {
        self.url_as(&self.owner)
    }

    fn runtime_url(&self) -> String {
        self.url_as(&self.runtime)
    }

    /// A store connected as the runtime role.
    async fn runtime_store(&self) -> Store {
        Store::connect(&settings(&self.runtime_url()))
            .await
            .unwrap()
    }
}

/// Runs `sql` as `client` and insists that Postgres refuses it for want of a privilege.
/// Returns the refusal's message.
async fn refused(client: &tokio_postgres::Client, sql: &str) -> String {
    let error = client
        .batch_execute(sql)
        .await
        .expect_err(&format!("the runtime role may run {sql}"));
    let db = error
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a database error: {error}"));
    assert_eq!(
        db.code(),
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "{sql}: {}",
        db.message()
    );
    db.message().to_owned()
}

async fn epoch(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT epoch FROM keyflight_operator_epoch", &[])
        .await
        .unwrap()
        .get(0)
}

fn claim(label: &str) -> ClaimRequest {
    claim_req(fingerprint(label), 10_000)
}

fn release(claim_id: Uuid, release_as: ReleaseAs) -> ReleaseRequest {
    ReleaseRequest {
        claim_id,
        release_as,
        cooldown_ms: None,
        previous_scope: None,
    }
}

#[tokio::test]
async fn the_runtime_role_serves_every_call() {
    let split = RoleSplit::new().await;
    let store = split.runtime_store().await;
    let db = raw_client(&split.runtime_url()).await;
    store.readiness().await.unwrap();
    assert_eq!(
        store.excess_privileges().await.unwrap(),
        Vec::<String>::new()
    );

    // claim, renew, finalize, and the replay.
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim("served")).await;
    store
        .renew(
            &scope,
            &RenewRequest {
                claim_id,
                lease_ms: 10_000,
                previous_scope: None,
            },
        )
        .await
        .unwrap();
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    assert!(matches!(
        store
            .claim(&scope, &claim("served"))
            .await
            .unwrap()
            .response,
        ClaimResponse::Completed { .. }
    ));

    // release as forget, cooldown and unknown.
    for release_as in [ReleaseAs::Forget, ReleaseAs::Cooldown, ReleaseAs::Unknown] {
        let scope = fresh_scope();
        let (claim_id, _, _) = must_win(&store, &scope, &claim("released")).await;
        store
            .release(&scope, &release(claim_id, release_as))
            .await
            .unwrap();
    }

    // A follower long-polls over the runtime role's LISTEN connection and is woken.
    let (_shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    let (longpoll, _listener) = LongPoll::start(&split.runtime_url(), shutdown_rx);
    eventually(
        "the LISTEN connection is up",
        std::time::Duration::from_secs(10),
        || async { longpoll.listening() },
    )
    .await;
    let scope = fresh_scope();
    let waiting = ClaimRequest {
        wait_ms: Some(30_000),
        ..claim("followed")
    };
    let (claim_id, _, _) = must_win(&store, &scope, &waiting).await;
    let follower = {
        let (store, longpoll, waiting) = (store.clone(), longpoll.clone(), waiting.clone());
        tokio::spawn(async move { claim_with_wait(&store, &longpoll, &scope, &waiting).await })
    };
    eventually(
        "the follower parked",
        std::time::Duration::from_secs(10),
        || async { longpoll.waiting() == 1 },
    )
    .await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    assert!(matches!(
        follower.await.unwrap().unwrap(),
        ClaimResponse::Completed { .. }
    ));

    // Each change an edge may hold wrong bumps the epoch, through the owner's function.
    let before = store.epoch().await.unwrap();
    let unknown = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &unknown, &claim("resolved")).await;
    store
        .release(&unknown, &release(claim_id, ReleaseAs::Unknown))
        .await
        .unwrap();
    store
        .resolve(
            &unknown,
            &ResolveRequest {
                resolve_as: ResolveAs::Completed,
                response: Some(sample_response()),
                reason: "INC-1".into(),
            },
            "alice",
        )
        .await
        .unwrap();
    store.erase(&unknown, "alice", "DSR-1").await.unwrap();
    let reclaimed = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &reclaimed, &claim("reclaimed")).await;
    store
        .finalize(&reclaimed, finalize_ok(claim_id))
        .await
        .unwrap();
    age_past_retention(&db, &reclaimed).await;
    let (_, _, how) = must_win(&store, &reclaimed, &claim("reclaimed")).await;
    assert_eq!(how, WonHow::RecoveredTtl);
    assert_eq!(store.epoch().await.unwrap(), before + 3);
    let audited: i64 = db
        .query_one(
            "SELECT count(*) FROM keyflight_operator_audit WHERE scope = $1",
            &[&unknown.0.as_slice()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(audited, 2);

    // Retention cleanup deletes what has expired.
    let expired = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &expired, &claim("expired")).await;
    store
        .finalize(&expired, finalize_ok(claim_id))
        .await
        .unwrap();
    age_past_retention(&db, &expired).await;
    assert!(store.delete_expired_batch(1000).await.unwrap() >= 1);
    assert_eq!(row_state(&db, &expired).await, None);
}

#[tokio::test]
async fn the_runtime_role_cannot_rewrite_the_migration_history() {
    let split = RoleSplit::new().await;
    let db = raw_client(&split.runtime_url()).await;
    refused(
        &db,
        "UPDATE refinery_schema_history SET checksum = '0' WHERE version = 1",
    )
    .await;
    refused(&db, "DELETE FROM refinery_schema_history").await;
    refused(
        &db,
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
         VALUES (999, 'forged', 'now', '0')",
    )
    .await;
    refused(&db, "TRUNCATE refinery_schema_history").await;
}

#[tokio::test]
async fn the_runtime_role_cannot_set_the_operator_epoch() {
    let split = RoleSplit::new().await;
    let db = raw_client(&split.runtime_url()).await;
    let store = split.runtime_store().await;
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim("epoch")).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    store.erase(&scope, "alice", "DSR-2").await.unwrap();
    let bumped = epoch(&db).await;
    assert!(bumped > 0);

    // Back to an epoch an edge cached the erased record under: edges would replay it again.
    refused(&db, "UPDATE keyflight_operator_epoch SET epoch = 0").await;
    refused(&db, "DELETE FROM keyflight_operator_epoch").await;
    refused(&db, "INSERT INTO keyflight_operator_epoch DEFAULT VALUES").await;
    refused(&db, "SELECT keyflight_bump_operator_epoch()").await;
    assert_eq!(epoch(&db).await, bumped);
}

#[tokio::test]
async fn the_runtime_role_cannot_change_the_schema() {
    let split = RoleSplit::new().await;
    let db = raw_client(&split.runtime_url()).await;
    refused(&db, "CREATE TABLE keyflight_shadow (scope bytea)").await;
    refused(&db, "CREATE SCHEMA keyflight_shadow").await;
    refused(&db, "DROP TABLE keyflight_records").await;
    refused(
        &db,
        "ALTER TABLE keyflight_records ADD COLUMN extra integer",
    )
    .await;
    refused(
        &db,
        "ALTER TABLE keyflight_records DROP CONSTRAINT keyflight_records_state_known",
    )
    .await;
    refused(
        &db,
        "DROP TRIGGER keyflight_records_epoch_delete ON keyflight_records",
    )
    .await;
    refused(
        &db,
        "CREATE TRIGGER keyflight_shadow AFTER INSERT ON keyflight_records
         FOR EACH ROW EXECUTE FUNCTION keyflight_notify_settled()",
    )
    .await;
    refused(
        &db,
        "CREATE OR REPLACE FUNCTION keyflight_bump_operator_epoch() RETURNS trigger
                  LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
    )
    .await;
    refused(&db, "TRUNCATE keyflight_records").await;
    // The fence sequence only counts up: setval could hand a fence out twice (L2).
    refused(&db, "SELECT setval('keyflight_fence_seq', 1)").await;
    refused(&db, "ALTER SEQUENCE keyflight_fence_seq RESTART").await;
}

#[tokio::test]
async fn the_runtime_role_cannot_delete_or_change_audit_rows() {
    let split = RoleSplit::new().await;
    let db = raw_client(&split.runtime_url()).await;
    let store = split.runtime_store().await;
    let scope = fresh_scope();
    let (claim_id, _, _) = must_win(&store, &scope, &claim("audited")).await;
    store.finalize(&scope, finalize_ok(claim_id)).await.unwrap();
    store.erase(&scope, "alice", "DSR-3").await.unwrap();
    let rows = "SELECT count(*) FROM keyflight_operator_audit WHERE actor = 'alice'";
    assert_eq!(db.query_one(rows, &[]).await.unwrap().get::<_, i64>(0), 1);

    // Refused by the privilege, not only by the append-only trigger, which its owner can
    // switch off. Nor can it write a row of its own choosing: one that backdates an erase
    // to before an incident, or names another operator; the audited actions append through
    // the owner's function only.
    for sql in [
        "DELETE FROM keyflight_operator_audit",
        "UPDATE keyflight_operator_audit SET actor = 'mallory'",
        "TRUNCATE keyflight_operator_audit",
        "INSERT INTO keyflight_operator_audit (at, actor, action, scope, reason)
         VALUES ('2020-01-01', 'bob', 'erase', decode(repeat('00', 32), 'hex'), 'forged')",
        "INSERT INTO keyflight_operator_audit (actor, action, scope, reason)
         SELECT 'alice', 'erase', scope, 'forged' FROM keyflight_operator_audit",
    ] {
        let message = refused(&db, sql).await;
        assert!(message.starts_with("permission denied"), "{sql}: {message}");
    }
    refused(
        &db,
        "ALTER TABLE keyflight_operator_audit DISABLE TRIGGER keyflight_operator_audit_no_change",
    )
    .await;
    refused(
        &db,
        "DROP TRIGGER keyflight_operator_audit_no_change ON keyflight_operator_audit",
    )
    .await;
    assert_eq!(db.query_one(rows, &[]).await.unwrap().get::<_, i64>(0), 1);
}

#[tokio::test]
async fn excess_privileges_name_the_owner_a_superuser_and_broad_grants() {
    let split = RoleSplit::new().await;
    let owner = Store::connect(&settings(&split.owner_url())).await.unwrap();
    let excess = owner.excess_privileges().await.unwrap();
    assert!(
        excess
            .iter()
            .any(|e| e.starts_with("may act as the owner of keyflight_records")),
        "{excess:?}"
    );
    assert!(
        excess.iter().any(|e| e == "may CREATE in schema keyflight"),
        "{excess:?}"
    );
    let superuser = Store::connect(&settings(&split.url_as("postgres")))
        .await
        .unwrap();
    assert_eq!(
        superuser.excess_privileges().await.unwrap(),
        vec!["is a superuser".to_owned()]
    );

    // The grants an older install gave every table: DML everywhere, the sequence's SELECT.
    let in_database = raw_client(&split.url_as("postgres")).await;
    in_database
        .batch_execute(&format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA keyflight TO {runtime};
             GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA keyflight TO {runtime};",
            runtime = split.runtime
        ))
        .await
        .unwrap();
    let broad = split.runtime_store().await;
    let excess = broad.excess_privileges().await.unwrap();
    for expected in [
        "may UPDATE refinery_schema_history",
        "may UPDATE keyflight_operator_epoch",
        "may DELETE keyflight_operator_audit",
        "may SELECT keyflight_fence_seq",
    ] {
        assert!(
            excess.iter().any(|e| e == expected),
            "{expected}: {excess:?}"
        );
    }

    // Granting again takes back everything serving does not need.
    grant_runtime(&split.owner_url(), &split.runtime)
        .await
        .unwrap();
    assert_eq!(
        broad.excess_privileges().await.unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn granting_refuses_the_owner_itself_and_an_unknown_role() {
    let split = RoleSplit::new().await;
    let to_owner = grant_runtime(&split.owner_url(), &split.owner).await;
    assert!(
        to_owner
            .as_ref()
            .is_err_and(|e| e.to_string().contains("another one")),
        "{to_owner:?}"
    );
    let to_nobody = grant_runtime(&split.owner_url(), "kf_nobody").await;
    assert!(
        to_nobody
            .as_ref()
            .is_err_and(|e| e.to_string().contains("does not exist")),
        "{to_nobody:?}"
    );
}

#[tokio::test]
async fn granting_fails_loudly_when_the_owner_does_not_own_the_objects() {
    let split = RoleSplit::new().await;
    // A second schema, migrated by the superuser, in the owner role's search_path.
    let other = "keyflight_elsewhere";
    let superuser = raw_client(&split.url_as("postgres")).await;
    superuser
        .batch_execute(&format!(
            "CREATE SCHEMA {other};
             GRANT USAGE ON SCHEMA {other} TO {owner};
             ALTER ROLE {owner} IN DATABASE {db} SET search_path = {other};",
            owner = split.owner,
            db = split.database,
        ))
        .await
        .unwrap();
    let in_other = format!(
        "{}&options=-c%20search_path%3D{other}",
        split.url_as("postgres")
    );
    migrate(&in_other).await.unwrap();
    // Rights without the grant option: GRANT then warns and grants nothing, no error.
    superuser
        .batch_execute(&format!(
            "GRANT ALL ON ALL TABLES IN SCHEMA {other} TO {owner};
             GRANT ALL ON ALL SEQUENCES IN SCHEMA {other} TO {owner};
             GRANT ALL ON ALL FUNCTIONS IN SCHEMA {other} TO {owner};",
            owner = split.owner,
        ))
        .await
        .unwrap();
    let refused = grant_runtime(&split.owner_url(), &split.runtime).await;
    assert!(
        refused.as_ref().is_err_and(|e| e
            .to_string()
            .contains("could not grant SELECT on keyflight_records")),
        "{refused:?}"
    );
}
