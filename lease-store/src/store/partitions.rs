//! L9: a partitioned database — the records spread over several Postgres clusters, behind
//! a PL/Proxy router (`docs/distributed-sql.md#pl-proxy-partitioned-postgres`).
//!
//! Every statement the store runs on one scope is also installed, verbatim, as an SQL
//! function `keyflight_<name>` on each partition, and as a PL/Proxy function of the same
//! signature on the router database, which runs it on the partition that owns the scope
//! (`RUN ON keyflight_partition($1)`). A statement over all records (cleanup, the epoch, the
//! operator's list) runs on every partition (`RUN ON ALL`) and the store combines the rows.
//! A store serving a partitioned database sends the router the call
//! ([`Routed::call`]) instead of the statement; nothing else in it changes, so each claim
//! still runs whole, with single-node semantics, on one partition.
//!
//! The functions are generated from the statements themselves when `lease-store migrate`
//! runs with partitions ([`install`]): each statement is prepared on the first partition
//! and its parameter and column types become the function's signature, so a statement and
//! its function cannot drift apart.
//!
//! The router maps a scope to one of [`SLOTS`] slots by its first four bytes (a SHA-256:
//! uniform), and each slot to a partition; PL/Proxy opens one connection per partition, not
//! per slot. Adding a partition is moving slots (`docs/operations.md#adding-a-partition`).

use std::sync::OnceLock;

use tokio_postgres::Client;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::types::{Kind, Type};

use super::StoreError;

/// How many slots the router hashes scopes into: a power of two (PL/Proxy's rule), and
/// enough that slots spread evenly over any partition count an operator is likely to run.
pub const SLOTS: usize = 64;

/// The PL/Proxy cluster (a foreign server on the router) naming the slots' partitions.
const CLUSTER: &str = "keyflight_partitions";

/// Where the router runs a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOn {
    /// On the partition that owns the scope in `$1`.
    Scope,
    /// On every partition; the store combines the rows ([`Routed::call`]).
    All,
}

/// A statement, and how a partitioned database runs it.
#[derive(Debug)]
pub struct Routed {
    /// `keyflight_<name>`: the function on the router and on every partition.
    pub name: &'static str,
    /// The statement: what a single database runs, and the partition function's body.
    pub sql: &'static str,
    /// Where the router runs it.
    pub on: RunOn,
    /// What the store sends the router for a statement over every partition (rows to
    /// combine); `None`: every row the function returns, as the statement would.
    combine: Option<&'static str>,
    /// The call, built once.
    call: OnceLock<String>,
}

impl Routed {
    /// A statement on the scope in `$1`.
    pub const fn by_scope(name: &'static str, sql: &'static str) -> Routed {
        Routed {
            name,
            sql,
            on: RunOn::Scope,
            combine: None,
            call: OnceLock::new(),
        }
    }

    /// A statement over every partition. `combine` is what the store sends the router: a
    /// query over `keyflight_<name>(…)`'s rows from every partition (a sum, or a merge
    /// ordered and cut as the statement orders and cuts its own), or `None` for all of them.
    pub const fn on_all(
        name: &'static str,
        sql: &'static str,
        combine: Option<&'static str>,
    ) -> Routed {
        Routed {
            name,
            sql,
            on: RunOn::All,
            combine,
            call: OnceLock::new(),
        }
    }

    /// What the store sends a router: `SELECT * FROM keyflight_<name>($1, …, $n)`, or the
    /// combining query.
    pub fn call(&self) -> &str {
        self.call.get_or_init(|| match self.combine {
            Some(combine) => combine.to_owned(),
            None => format!(
                "SELECT * FROM keyflight_{}({})",
                self.name,
                placeholders(parameter_count(self.sql))
            ),
        })
    }
}

/// `$1, $2, …, $n`.
fn placeholders(n: usize) -> String {
    (1..=n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The highest `$n` a statement names: its parameter count (every statement names all of
/// its parameters).
fn parameter_count(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    let mut highest = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'$' {
            let digits = bytes[at + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if let Ok(n) = sql[at + 1..at + 1 + digits].parse::<usize>() {
                highest = highest.max(n);
            }
            at += digits;
        }
        at += 1;
    }
    highest
}

/// Every statement a partitioned database runs, in the order their functions are installed.
pub fn routed() -> [&'static Routed; 18] {
    use super::{claim, epoch, held, lease, orphan, records, retention, watch};
    [
        &claim::CLAIM,
        &claim::READ,
        &watch::WATCH,
        &lease::RENEW,
        &lease::FINALIZE,
        &lease::RELEASE_COOLDOWN,
        &lease::RELEASE_UNKNOWN,
        &lease::RELEASE_FORGET,
        &lease::OWNER,
        &orphan::RELEASE_ORPHAN,
        &records::GET,
        &records::RESOLVE_COMPLETED,
        &records::RESOLVE_FAILED,
        &records::ERASE,
        &records::LIST,
        &epoch::EPOCH,
        &retention::DELETE_EXPIRED,
        &held::HOLD_ABANDONED,
    ]
}

/// A function's signature, read from its statement prepared on a partition.
struct Signature {
    /// Parameter types, in order.
    params: Vec<String>,
    /// Returned columns (name, type); none for a statement without `RETURNING`.
    columns: Vec<(String, String)>,
}

impl Signature {
    async fn of(client: &Client, routed: &Routed) -> Result<Signature, StoreError> {
        let statement = client.prepare(routed.sql).await?;
        Ok(Signature {
            params: statement.params().iter().map(type_name).collect(),
            columns: statement
                .columns()
                .iter()
                .map(|column| (column.name().to_owned(), type_name(column.type_())))
                .collect(),
        })
    }

    /// `keyflight_<name>(types) RETURNS …`: a statement that returns no rows becomes one
    /// returning a row per row it changed, so the router's caller still counts them.
    fn head(&self, name: &str) -> String {
        let returns = match self.columns.is_empty() {
            true => "SETOF integer".to_owned(),
            false => {
                let columns: Vec<String> = self
                    .columns
                    .iter()
                    .map(|(name, ty)| format!("\"{name}\" {ty}"))
                    .collect();
                format!("TABLE ({})", columns.join(", "))
            }
        };
        format!(
            "CREATE OR REPLACE FUNCTION keyflight_{name}({}) RETURNS {returns}",
            self.params.join(", ")
        )
    }

    /// The partition's function: the statement itself.
    fn on_partition(&self, routed: &Routed) -> String {
        let returning = match self.columns.is_empty() {
            true => " RETURNING 1",
            false => "",
        };
        format!(
            "{} LANGUAGE sql VOLATILE AS $keyflight${}{returning}$keyflight$;",
            self.head(routed.name),
            routed.sql
        )
    }

    /// The router's function: the same signature, run where the scope lives.
    fn on_router(&self, routed: &Routed) -> String {
        let run_on = match routed.on {
            RunOn::Scope => "RUN ON keyflight_partition($1)",
            RunOn::All => "RUN ON ALL",
        };
        format!(
            "{} LANGUAGE plproxy AS $keyflight$ CLUSTER '{CLUSTER}'; {run_on}; $keyflight$;",
            self.head(routed.name)
        )
    }
}

/// A parameter or column type as DDL spells it.
fn type_name(ty: &Type) -> String {
    match ty.kind() {
        Kind::Array(element) => format!("{}[]", type_name(element)),
        _ => ty.name().to_owned(),
    }
}

/// The slot of a scope: its first four bytes, big-endian, as PL/Proxy masks the router's
/// `keyflight_partition` hash ([`ROUTER_SQL`]).
pub fn slot_of(scope: &[u8]) -> usize {
    let mut head = [0u8; 4];
    for (to, from) in head.iter_mut().zip(scope) {
        *to = *from;
    }
    u32::from_be_bytes(head) as usize % SLOTS
}

/// The router's own objects: the hash PL/Proxy runs on a scope (its first four bytes as a
/// signed integer; PL/Proxy masks it to the slot count).
const ROUTER_SQL: &str = "
CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE OR REPLACE FUNCTION keyflight_partition(bytea) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT
    AS $$ SELECT ('x' || encode(substring($1 FROM 1 FOR 4), 'hex'))::bit(32)::integer $$;";

/// The schema version a router was installed for; `/readyz` compares it with the binary's.
const ROUTER_SCHEMA_SQL: &str = "SELECT keyflight_router_schema()";

/// What `migrate` with partitions did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionedReport {
    /// Each partition's migrations, in order.
    pub partitions: Vec<super::MigrationReport>,
    /// How many slots each partition owns.
    pub slots: Vec<usize>,
}

impl std::fmt::Display for PartitionedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (report, slots)) in self.partitions.iter().zip(&self.slots).enumerate() {
            writeln!(f, "partition {i}: {report}; owns {slots} of {SLOTS} slots")?;
        }
        write!(f, "router: {} functions routed", routed().len())
    }
}

/// `lease-store migrate` with partitions, in a safe order: every partition migrated and
/// given its functions first, then the router (its extension, slot map and functions), so
/// a router never routes to a partition without the function it calls. Slot `s` belongs to
/// partition `s mod n`. Re-running it changes nothing, unless the partitions changed: the
/// slot map is then rewritten (`docs/operations.md#adding-a-partition` says what must come
/// first).
pub async fn migrate_partitioned(
    router_url: &str,
    partition_urls: &[String],
    runtime_role: Option<&str>,
) -> Result<PartitionedReport, StoreError> {
    if partition_urls.is_empty() || partition_urls.len() > SLOTS {
        return Err(StoreError::Invalid(format!(
            "a partitioned database has 1 to {SLOTS} partitions"
        )));
    }
    let mut partitions = Vec::with_capacity(partition_urls.len());
    let mut signatures = Vec::new();
    for (index, url) in partition_urls.iter().enumerate() {
        partitions.push(super::migrate(url).await?);
        let (client, driver) = super::migrate::owner_connection(url).await?;
        let installed = match own_fences(&client, index).await {
            Ok(()) => install_on_partition(&client).await,
            Err(e) => Err(e),
        };
        if let (Ok(_), Some(role)) = (&installed, runtime_role) {
            super::privilege::grant_runtime(&client, role).await?;
        }
        drop(client);
        let _ = driver.await;
        signatures = installed?;
    }
    let (client, driver) = super::migrate::owner_connection(router_url).await?;
    let installed = install_on_router(&client, partition_urls, &signatures, runtime_role).await;
    drop(client);
    let _ = driver.await;
    installed?;
    let mut slots = vec![0; partition_urls.len()];
    for slot in 0..SLOTS {
        slots[slot % partition_urls.len()] += 1;
    }
    Ok(PartitionedReport { partitions, slots })
}

/// Installs every routed statement's function on a migrated partition; their signatures.
async fn install_on_partition(
    client: &Client,
) -> Result<Vec<(&'static Routed, Signature)>, StoreError> {
    let mut installed = Vec::new();
    for routed in routed() {
        let signature = Signature::of(client, routed).await?;
        client
            .batch_execute(&signature.on_partition(routed))
            .await?;
        installed.push((routed, signature));
    }
    Ok(installed)
}

/// Installs the router: PL/Proxy, the slot map (a foreign server whose option `pN` is slot
/// N's partition), the user mapping PL/Proxy connects with, and the routed functions.
async fn install_on_router(
    client: &Client,
    partition_urls: &[String],
    signatures: &[(&'static Routed, Signature)],
    runtime_role: Option<&str>,
) -> Result<(), StoreError> {
    let partitions: Vec<Partition> = partition_urls
        .iter()
        .map(|url| Partition::parse(url))
        .collect::<Result<_, _>>()?;
    let credentials = &partitions[0];
    if partitions
        .iter()
        .any(|p| p.user != credentials.user || p.password != credentials.password)
    {
        return Err(StoreError::Invalid(
            "every partition URL must name the same user and password: the router connects \
             to all of them with one user mapping"
                .into(),
        ));
    }
    let slots: Vec<String> = (0..SLOTS)
        .map(|slot| {
            format!(
                "p{slot} {}",
                quote_literal(&partitions[slot % partitions.len()].connstr)
            )
        })
        .collect();
    let mut ddl = String::from("BEGIN;\n");
    ddl.push_str(ROUTER_SQL);
    ddl.push_str(&format!(
        "\nDROP SERVER IF EXISTS {CLUSTER} CASCADE;\n\
         CREATE SERVER {CLUSTER} FOREIGN DATA WRAPPER plproxy OPTIONS (\
         connection_lifetime '1800', {});\n",
        slots.join(", ")
    ));
    let mut mapping = vec![format!("user {}", quote_literal(&credentials.user))];
    if let Some(password) = &credentials.password {
        mapping.push(format!("password {}", quote_literal(password)));
    }
    ddl.push_str(&format!(
        "CREATE USER MAPPING FOR PUBLIC SERVER {CLUSTER} OPTIONS ({});\n",
        mapping.join(", ")
    ));
    for (routed, signature) in signatures {
        ddl.push_str(&signature.on_router(routed));
        ddl.push('\n');
    }
    ddl.push_str(&format!(
        "CREATE OR REPLACE FUNCTION keyflight_router_schema() RETURNS bigint LANGUAGE sql \
         IMMUTABLE AS $$ SELECT {}::bigint $$;\n",
        super::migrate::latest_embedded()
    ));
    if let Some(role) = runtime_role {
        let role = super::privilege::quote_identifier(role);
        ddl.push_str(&format!(
            "GRANT USAGE ON FOREIGN SERVER {CLUSTER} TO {role};\n"
        ));
    }
    ddl.push_str("COMMIT;");
    client.batch_execute(&ddl).await?;
    Ok(())
}

/// `Ok` when the router was installed for this binary's schema or a newer one.
pub(super) async fn check_router(client: &Client) -> Result<(), StoreError> {
    let installed: i64 = client
        .query_one(ROUTER_SCHEMA_SQL, &[])
        .await
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "the router is not installed: run `lease-store migrate` with the partitions \
                 ({e})"
            ))
        })?
        .try_get(0)?;
    let wanted = super::migrate::latest_embedded();
    if installed >= wanted {
        Ok(())
    } else {
        Err(StoreError::Unavailable(format!(
            "the router was installed for V{installed}, this binary needs V{wanted}: run \
             `lease-store migrate` with the partitions"
        )))
    }
}

/// One partition as the router's slot map names it.
struct Partition {
    /// libpq `key=value` connection string, without credentials.
    connstr: String,
    user: String,
    password: Option<String>,
}

impl Partition {
    /// Every host of the URL (a Patroni pair's two, say) with `target_session_attrs` kept,
    /// so PL/Proxy's libpq follows a partition's failover as the store's own pool does.
    fn parse(url: &str) -> Result<Partition, StoreError> {
        let config = crate::db::parse(url)?.config;
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|host| match host {
                tokio_postgres::config::Host::Tcp(host) => host.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
        let mut parts = vec![format!("host={}", hosts.join(","))];
        if !ports.is_empty() {
            parts.push(format!("port={}", ports.join(",")));
        }
        if let Some(dbname) = config.get_dbname() {
            parts.push(format!("dbname={dbname}"));
        }
        if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
            parts.push("target_session_attrs=read-write".to_owned());
        }
        let user = config
            .get_user()
            .ok_or_else(|| StoreError::Invalid("a partition URL names no user".into()))?
            .to_owned();
        let password = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        Ok(Partition {
            connstr: parts.join(" "),
            user,
            password,
        })
    }
}

/// Makes partition `index`'s fences its own residue class modulo [`SLOTS`]: unique across
/// partitions (a fence names one claim in the whole mesh, as on one database), and still
/// increasing on each. Run once per partition; again, it checks the partition kept its
/// place (moving a partition moves its scopes: `docs/operations.md#adding-a-partition`).
async fn own_fences(client: &Client, index: usize) -> Result<(), StoreError> {
    let stride = i64::try_from(SLOTS).unwrap_or(i64::MAX);
    let residue = i64::try_from(index).unwrap_or(i64::MAX) % stride;
    let row = client
        .query_one(
            "SELECT increment_by, COALESCE(last_value, 0) AS last_value \
               FROM pg_sequences WHERE sequencename = 'keyflight_fence_seq'",
            &[],
        )
        .await?;
    let (increment, last): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
    if increment == stride {
        return match last.rem_euclid(stride) == (residue + 1) % stride || last == 0 {
            true => Ok(()),
            false => Err(StoreError::Invalid(format!(
                "partition {index} hands out another partition's fences: partitions must be \
                 named in the order they were first migrated"
            ))),
        };
    }
    // The first fence above every fence handed out so far, in this partition's class.
    let mut next = last + 1;
    next += (residue + 1 - next).rem_euclid(stride);
    client
        .batch_execute(&format!(
            "ALTER SEQUENCE keyflight_fence_seq INCREMENT BY {stride}; \
             SELECT setval('keyflight_fence_seq', {next}, false);"
        ))
        .await?;
    Ok(())
}

/// An SQL string literal.
fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statements_call_names_each_of_its_parameters() {
        assert_eq!(parameter_count("SELECT 1"), 0);
        assert_eq!(parameter_count("WHERE a = $1 AND b = $12 AND c = $2"), 12);
        let routed = Routed::by_scope("renew", "UPDATE t SET x = $3 WHERE s = $1 AND c = $2");
        assert_eq!(routed.call(), "SELECT * FROM keyflight_renew($1, $2, $3)");
    }

    #[test]
    fn every_routed_statement_has_its_own_function() {
        let mut names: Vec<&str> = routed().iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), routed().len());
    }

    #[test]
    fn a_scope_s_slot_is_its_first_four_bytes_modulo_the_slots() {
        assert_eq!(slot_of(&[0, 0, 0, 5, 9]), 5);
        assert_eq!(slot_of(&[0xff, 0xff, 0xff, 0xff]), SLOTS - 1);
        assert_eq!(slot_of(&[0, 0, 1, 0]), 256 % SLOTS);
    }
}
