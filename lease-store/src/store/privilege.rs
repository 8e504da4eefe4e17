//! Least privilege for the database roles (`docs/threat-model.md#the-database-roles`): what the
//! runtime role may do, granted by `lease-store migrate --grant-runtime ROLE` and checked by
//! `serve` at start.
//!
//! [`RUNTIME_GRANTS`] is the one list of what serving needs. [`grant_runtime`] makes a role's
//! rights on those objects exactly that list: it revokes everything first, so a role set up
//! with broader grants (an older install, default privileges) loses what it never needed, all
//! in one transaction, so a replica serving meanwhile never sees the role without a right it
//! uses; then it checks that the role holds every right of the list. The same list, turned around, is what [`Store::excess_privileges`] looks for: every
//! privilege on those objects the list does not give, ownership of them, the right to create
//! objects, and the role attributes that imply all of that.
//!
//! Rolling deploys: each release's migration Job re-grants, so a release that needs a new
//! right on a new object brings it; a right one release stops using is removed from the list
//! only in the release after, when no replica of the older one serves any more
//! (`lease-store/migrations/README.md`, rule 7).

use super::{Store, StoreError};
use keyflight_store_core::sql::privilege::{
    CURRENT_USER_SQL, EXCESS_PRIVILEGES_SQL, FUNCTIONS_OWNED_SQL, MISSING_GRANTS_SQL,
    ROUTER_EXCESS_SQL, SCHEMA_SQL,
};

/// A kind of object the runtime role is granted rights on; its name is the SQL keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// A table.
    Table,
    /// A sequence.
    Sequence,
    /// A function, named with its argument types.
    Function,
}

impl ObjectKind {
    /// The keyword in `GRANT … ON <kind> …`, and the kind [`EXCESS_PRIVILEGES_SQL`] reads.
    fn keyword(self) -> &'static str {
        match self {
            ObjectKind::Table => "TABLE",
            ObjectKind::Sequence => "SEQUENCE",
            ObjectKind::Function => "FUNCTION",
        }
    }

    /// Every privilege Postgres knows on this kind of object.
    fn every_privilege(self) -> &'static [&'static str] {
        match self {
            ObjectKind::Table => &[
                "SELECT",
                "INSERT",
                "UPDATE",
                "DELETE",
                "TRUNCATE",
                "REFERENCES",
                "TRIGGER",
            ],
            ObjectKind::Sequence => &["USAGE", "SELECT", "UPDATE"],
            ObjectKind::Function => &["EXECUTE"],
        }
    }
}

/// One object the runtime role uses, and the only rights it gets on it.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeGrant {
    /// What it is.
    pub kind: ObjectKind,
    /// Its name, unqualified: found through the role's `search_path`, as the statements find it.
    pub object: &'static str,
    /// The rights serving needs on it.
    pub privileges: &'static [&'static str],
}

/// What serving needs, object by object; nothing else is granted.
///
/// - the records: claims insert and update, settle calls update or delete, erase and
///   retention cleanup delete, every read selects;
/// - the fence sequence: `nextval` only (`USAGE`), never `setval` (`UPDATE`), which could
///   hand a fence out twice;
/// - the operator epoch: read by `GET /v1/epoch`; it moves only through the owner's
///   trigger function (migration V6);
/// - the operator audit: erase and resolve append to it only through the owner's function
///   (migration V9), which sets each row's time and id; the role can neither change a row
///   nor insert one of its own making;
/// - refinery's history: `/readyz` reads the schema's version.
///
/// `LISTEN` and the trigger's `NOTIFY` need no grant.
pub const RUNTIME_GRANTS: &[RuntimeGrant] = &[
    RuntimeGrant {
        kind: ObjectKind::Table,
        object: "keyflight_records",
        privileges: &["SELECT", "INSERT", "UPDATE", "DELETE"],
    },
    RuntimeGrant {
        kind: ObjectKind::Sequence,
        object: "keyflight_fence_seq",
        privileges: &["USAGE"],
    },
    RuntimeGrant {
        kind: ObjectKind::Table,
        object: "keyflight_operator_epoch",
        privileges: &["SELECT"],
    },
    RuntimeGrant {
        kind: ObjectKind::Table,
        object: "keyflight_operator_audit",
        privileges: &["SELECT"],
    },
    RuntimeGrant {
        kind: ObjectKind::Function,
        object: "keyflight_operator_audit_append(text, text, bytea, text, bytea)",
        privileges: &["EXECUTE"],
    },
    RuntimeGrant {
        kind: ObjectKind::Table,
        object: super::migrate::HISTORY_TABLE,
        privileges: &["SELECT"],
    },
];

/// Every (object, kind, privilege) that [`RUNTIME_GRANTS`] gives.
fn granted() -> Vec<(&'static str, &'static str, &'static str)> {
    RUNTIME_GRANTS
        .iter()
        .flat_map(|grant| {
            grant
                .privileges
                .iter()
                .map(|privilege| (grant.object, grant.kind.keyword(), *privilege))
        })
        .collect()
}

/// Every (object, kind, privilege) on [`RUNTIME_GRANTS`]' objects that the list does not give.
fn forbidden() -> Vec<(&'static str, &'static str, &'static str)> {
    RUNTIME_GRANTS
        .iter()
        .flat_map(|grant| {
            grant
                .kind
                .every_privilege()
                .iter()
                .filter(|privilege| !grant.privileges.contains(privilege))
                .map(|privilege| (grant.object, grant.kind.keyword(), *privilege))
        })
        .collect()
}

/// The statements that give `role` exactly [`RUNTIME_GRANTS`] in `schema`. `role` and `schema`
/// are quoted identifiers ([`quote_identifier`]). Default privileges the running role (the
/// owner) set for `role` are revoked too: an object a later migration creates gets its rights
/// from this list, never from a default.
fn grant_statements(role: &str, schema: &str) -> String {
    let mut sql = String::from("BEGIN;\n");
    sql.push_str(&format!("GRANT USAGE ON SCHEMA {schema} TO {role};\n"));
    for grant in RUNTIME_GRANTS {
        let kind = grant.kind.keyword();
        let object = grant.object;
        sql.push_str(&format!("REVOKE ALL ON {kind} {object} FROM {role};\n"));
        sql.push_str(&format!(
            "GRANT {} ON {kind} {object} TO {role};\n",
            grant.privileges.join(", ")
        ));
    }
    for kind in ["TABLES", "SEQUENCES"] {
        sql.push_str(&format!(
            "ALTER DEFAULT PRIVILEGES REVOKE ALL ON {kind} FROM {role};\n\
             ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} REVOKE ALL ON {kind} FROM {role};\n"
        ));
    }
    sql.push_str("COMMIT;");
    sql
}

/// `name` as a quoted SQL identifier (`"…"`, inner quotes doubled), so any role name,
/// including one with capitals or spaces, names exactly that role and nothing else.
pub(super) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Gives `role` exactly [`RUNTIME_GRANTS`] (plus `USAGE` on the records' schema), as the role
/// `client` is connected as, which must own the objects (it ran the migrations).
pub(super) async fn grant_runtime(
    client: &tokio_postgres::Client,
    role: &str,
) -> Result<(), StoreError> {
    if role.is_empty() || role.contains('\0') {
        return Err(StoreError::Invalid(
            "--grant-runtime needs a role name".into(),
        ));
    }
    let me: String = client.query_one(CURRENT_USER_SQL, &[]).await?.try_get(0)?;
    if me == role {
        return Err(StoreError::Invalid(format!(
            "--grant-runtime {role}: that is the role running the migrations; the runtime role \
             must be another one"
        )));
    }
    let schema: String = client.query_one(SCHEMA_SQL, &[]).await?.try_get(0)?;
    // regnamespace::text is already quoted where it must be.
    client
        .batch_execute(&grant_statements(&quote_identifier(role), &schema))
        .await
        .map_err(|e| match e.as_db_error() {
            // A role that does not exist: a setting to fix, named as such, not as an outage.
            Some(db) => StoreError::Invalid(format!(
                "--grant-runtime {role}: {}: {}",
                db.code().code(),
                db.message()
            )),
            None => StoreError::from(e),
        })?;
    let missing = query_triples(client, MISSING_GRANTS_SQL, Some(role), &granted()).await?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "--grant-runtime {role}: could not grant {}: run migrate as the role that owns \
             keyflight's objects",
            missing.join(", ")
        )))
    }
}

/// Runs `sql` with the triples as `$2`, `$3`, `$4`, and as `$1` the role when given, else
/// the names of [`RUNTIME_GRANTS`]' tables and sequences (a function's rights are all
/// granted, so none is in excess); collects its one text column.
async fn query_triples(
    client: &tokio_postgres::Client,
    sql: &str,
    role: Option<&str>,
    triples: &[(&str, &str, &str)],
) -> Result<Vec<String>, StoreError> {
    let objects: Vec<&str> = RUNTIME_GRANTS
        .iter()
        .filter(|grant| grant.kind != ObjectKind::Function)
        .map(|grant| grant.object)
        .collect();
    let names: Vec<&str> = triples.iter().map(|t| t.0).collect();
    let kinds: Vec<&str> = triples.iter().map(|t| t.1).collect();
    let privileges: Vec<&str> = triples.iter().map(|t| t.2).collect();
    let rows = match role {
        Some(role) => {
            client
                .query(sql, &[&role, &names, &kinds, &privileges])
                .await?
        }
        None => {
            client
                .query(sql, &[&objects, &names, &kinds, &privileges])
                .await?
        }
    };
    first_column(&rows)
}

/// Each row's one text column.
fn first_column(rows: &[tokio_postgres::Row]) -> Result<Vec<String>, StoreError> {
    rows.iter()
        .map(|row| Ok(row.try_get::<_, String>(0)?))
        .collect()
}

impl Store {
    /// What this store's role can do beyond serving ([`RUNTIME_GRANTS`]): empty for a runtime
    /// role granted by `migrate --grant-runtime`; for the owner, a superuser or a role with
    /// broader grants, one line per excess right.
    ///
    /// On a partitioned database the role is checked on the router (it may call the routed
    /// functions and nothing more: never own them or the slot map, nor create objects
    /// beside them) and on every partition, through its partition URL, as on one database
    /// (the partition's functions included). Each finding names where it was found.
    pub async fn excess_privileges(&self) -> Result<Vec<String>, StoreError> {
        let forbidden = forbidden();
        if !self.partitioned() {
            return self
                .run(async |client| {
                    query_triples(client, EXCESS_PRIVILEGES_SQL, None, &forbidden).await
                })
                .await;
        }
        let mut excess: Vec<String> = self
            .run(async |client| {
                let mut found = query_findings(client, ROUTER_EXCESS_SQL).await?;
                found.extend(query_findings(client, FUNCTIONS_OWNED_SQL).await?);
                Ok(found)
            })
            .await?
            .into_iter()
            .map(|finding| format!("router: {finding}"))
            .collect();
        for (index, url) in self.partitions.iter().enumerate() {
            let database = crate::db::parse(url)?;
            let (client, connection) = database.config.connect(database.tls).await?;
            let driver = tokio::spawn(connection);
            let found = async {
                let mut found =
                    query_triples(&client, EXCESS_PRIVILEGES_SQL, None, &forbidden).await?;
                found.extend(query_findings(&client, FUNCTIONS_OWNED_SQL).await?);
                Ok::<_, StoreError>(found)
            }
            .await;
            drop(client);
            let _ = driver.await;
            excess.extend(
                found?
                    .into_iter()
                    .map(|finding| format!("partition {index}: {finding}")),
            );
        }
        Ok(excess)
    }
}

/// Runs `sql` (no parameters) and collects its one text column.
async fn query_findings(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<String>, StoreError> {
    first_column(&client.query(sql, &[]).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_role_may_never_change_history_the_epoch_or_the_audit() {
        let forbidden = forbidden();
        for must_not in [
            ("refinery_schema_history", "INSERT"),
            ("refinery_schema_history", "UPDATE"),
            ("refinery_schema_history", "DELETE"),
            ("keyflight_operator_epoch", "UPDATE"),
            ("keyflight_operator_audit", "INSERT"),
            ("keyflight_operator_audit", "UPDATE"),
            ("keyflight_operator_audit", "DELETE"),
            ("keyflight_operator_audit", "TRUNCATE"),
            ("keyflight_records", "TRUNCATE"),
            ("keyflight_records", "TRIGGER"),
            ("keyflight_fence_seq", "UPDATE"),
        ] {
            assert!(
                forbidden
                    .iter()
                    .any(|(object, _, privilege)| (*object, *privilege) == must_not),
                "{must_not:?} is not checked"
            );
        }
    }

    #[test]
    fn a_role_name_is_one_quoted_identifier() {
        assert_eq!(quote_identifier("keyflight_app"), "\"keyflight_app\"");
        assert_eq!(
            quote_identifier("a\"; DROP TABLE x; --"),
            "\"a\"\"; DROP TABLE x; --\""
        );
    }
}
