//! `lease-store migrate` with partitions: every partition migrated and given its functions,
//! then the router (`docs/distributed-sql.md#what-runs-where`).

use tokio_postgres::Client;
use tokio_postgres::config::TargetSessionAttrs;

use super::function::Signature;
use super::{CLUSTER, Routed, SLOTS, routed};
use crate::store::StoreError;
use keyflight_store_core::sql::partitions::{
    CLUSTER_OPTIONS_SQL, FENCE_INCREMENT_SQL, LAST_FENCE_SQL, ROUTER_SQL,
};

/// What `migrate` with partitions did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionedReport {
    /// Each partition's migrations, in order.
    pub partitions: Vec<crate::store::MigrationReport>,
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
/// a router never routes to a partition without the function it calls. A new router's slot
/// `s` belongs to partition `s mod n`; an installed router keeps its slot map
/// ([`slot_map`]).
pub async fn migrate_partitioned(
    router_url: &str,
    partition_urls: &[String],
    runtime: Option<&RuntimeRole>,
) -> Result<PartitionedReport, StoreError> {
    if partition_urls.is_empty() || partition_urls.len() > SLOTS {
        return Err(StoreError::Invalid(format!(
            "a partitioned database has 1 to {SLOTS} partitions"
        )));
    }
    let mut partitions = Vec::with_capacity(partition_urls.len());
    let mut signatures = Vec::new();
    for (index, url) in partition_urls.iter().enumerate() {
        partitions.push(crate::store::migrate(url).await?);
        let (client, driver) = crate::store::migrate::owner_connection(url).await?;
        let installed = match own_fences(&client, index, 0).await {
            Ok(()) => install_on_partition(&client).await,
            Err(e) => Err(e),
        };
        if let (Ok(installed), Some(runtime)) = (&installed, runtime) {
            crate::store::privilege::grant_runtime(&client, &runtime.role).await?;
            client
                .batch_execute(&execute_only_by(&runtime.role, installed, &[]))
                .await?;
        }
        drop(client);
        let _ = driver.await;
        signatures = installed?;
    }
    let (client, driver) = crate::store::migrate::owner_connection(router_url).await?;
    let installed = install_on_router(&client, partition_urls, &signatures, runtime).await;
    drop(client);
    let _ = driver.await;
    let slots = installed?;
    Ok(PartitionedReport { partitions, slots })
}

/// The role a partitioned database's stores run as (`migrate --grant-runtime`): granted what
/// serving needs on every partition, the only role that may call the routed functions, and
/// the one PL/Proxy connects to the partitions as (with `password`, when the partitions ask
/// for one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeRole {
    /// The role's name.
    pub role: String,
    /// Its password on the partitions, if they authenticate it by one.
    pub password: Option<String>,
}

/// Takes the routed functions (and `others`, by signature) from `PUBLIC` and gives them to
/// `role` alone: a function is executable by everyone unless revoked.
fn execute_only_by(
    role: &str,
    signatures: &[(&'static Routed, Signature)],
    others: &[&str],
) -> String {
    let role = crate::store::privilege::quote_identifier(role);
    signatures
        .iter()
        .map(|(routed, signature)| {
            format!("keyflight_{}({})", routed.name, signature.params.join(", "))
        })
        .chain(others.iter().map(|other| (*other).to_owned()))
        .map(|function| {
            format!(
                "REVOKE ALL ON FUNCTION {function} FROM PUBLIC; \
                 GRANT EXECUTE ON FUNCTION {function} TO {role};\n"
            )
        })
        .collect()
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
/// N's partition), the user mapping PL/Proxy connects with, and the routed functions; how
/// many slots each partition owns.
async fn install_on_router(
    client: &Client,
    partition_urls: &[String],
    signatures: &[(&'static Routed, Signature)],
    runtime: Option<&RuntimeRole>,
) -> Result<Vec<usize>, StoreError> {
    let partitions: Vec<Partition> = partition_urls
        .iter()
        .map(|url| Partition::parse(url))
        .collect::<Result<_, _>>()?;
    let credentials = &partitions[0];
    if runtime.is_none()
        && partitions
            .iter()
            .any(|p| p.user != credentials.user || p.password != credentials.password)
    {
        return Err(StoreError::Invalid(
            "every partition URL must name the same user and password: the router connects \
             to all of them with one user mapping"
                .into(),
        ));
    }
    let connstrs: Vec<&str> = partitions.iter().map(|p| p.connstr.as_str()).collect();
    let map = slot_map(client, &connstrs).await?;
    let slots: Vec<String> = map
        .iter()
        .enumerate()
        .map(|(slot, connstr)| format!("p{slot} {}", quote_literal(connstr)))
        .collect();
    let mut ddl = String::from("BEGIN;\n");
    ddl.push_str(ROUTER_SQL);
    ddl.push_str(&format!(
        "\nDROP SERVER IF EXISTS {CLUSTER} CASCADE;\n\
         CREATE SERVER {CLUSTER} FOREIGN DATA WRAPPER plproxy OPTIONS (\
         connection_lifetime '1800', {});\n",
        slots.join(", ")
    ));
    // PL/Proxy connects to the partitions as the runtime role when there is one (so the
    // routed statements run with its grants, not the owner's), else with the URLs' user; for
    // that role alone, never `PUBLIC`: any other role on the router would reach the
    // partitions with the mapping's credentials (`docs/distributed-sql.md#least-privilege`).
    let (mapped, user, password) = match runtime {
        Some(runtime) => (
            crate::store::privilege::quote_identifier(&runtime.role),
            &runtime.role,
            &runtime.password,
        ),
        None => (
            "CURRENT_USER".to_owned(),
            &credentials.user,
            &credentials.password,
        ),
    };
    let mut mapping = vec![format!("user {}", quote_literal(user))];
    if let Some(password) = password {
        mapping.push(format!("password {}", quote_literal(password)));
    }
    ddl.push_str(&format!(
        "CREATE USER MAPPING FOR {mapped} SERVER {CLUSTER} OPTIONS ({});\n",
        mapping.join(", ")
    ));
    for (routed, signature) in signatures {
        ddl.push_str(&signature.on_router(routed));
        ddl.push('\n');
    }
    ddl.push_str(&format!(
        "CREATE OR REPLACE FUNCTION keyflight_router_schema() RETURNS bigint LANGUAGE sql \
         IMMUTABLE AS $$ SELECT {}::bigint $$;\n",
        crate::store::migrate::latest_embedded()
    ));
    if let Some(runtime) = runtime {
        let role = crate::store::privilege::quote_identifier(&runtime.role);
        ddl.push_str(&format!(
            "GRANT USAGE ON FOREIGN SERVER {CLUSTER} TO {role};\n"
        ));
        ddl.push_str(&execute_only_by(
            &runtime.role,
            signatures,
            &["keyflight_partition(bytea)", "keyflight_router_schema()"],
        ));
    }
    ddl.push_str("COMMIT;");
    client.batch_execute(&ddl).await?;
    Ok(connstrs
        .iter()
        .map(|partition| map.iter().filter(|slot| slot == partition).count())
        .collect())
}

/// The slot map to install: the installed one when the router has one (a partition added
/// since owns no slot until slots are moved to it: `docs/distributed-sql.md#adding-a-partition`),
/// with each partition's TLS options as given now; else slot `s` on partition `s mod n`.
/// Refuses a map whose slot names a partition not given: its records would be out of reach.
pub(super) async fn slot_map(
    client: &Client,
    partitions: &[&str],
) -> Result<Vec<String>, StoreError> {
    let installed = client.query_opt(CLUSTER_OPTIONS_SQL, &[&CLUSTER]).await?;
    let Some(installed) = installed else {
        return Ok((0..SLOTS)
            .map(|slot| partitions[slot % partitions.len()].to_owned())
            .collect());
    };
    let options: Vec<String> = installed
        .try_get::<_, Option<Vec<String>>>(0)?
        .unwrap_or_default();
    let mut map = vec![String::new(); SLOTS];
    for option in options {
        let Some((name, connstr)) = option.split_once('=') else {
            continue;
        };
        if let Some(slot) = name.strip_prefix('p').and_then(|n| n.parse::<usize>().ok())
            && slot < SLOTS
        {
            map[slot] = connstr.to_owned();
        }
    }
    // A slot on a partition given names it with the TLS options given now.
    for entry in &mut map {
        if let Some(partition) = partitions
            .iter()
            .find(|partition| place_of(partition) == place_of(entry))
        {
            (*partition).clone_into(entry);
        }
    }
    if let Some((slot, connstr)) = map.iter().enumerate().find(|(_, connstr)| {
        !partitions.contains(&connstr.as_str()) && !connstr.contains(&format!("dbname={PARKED}"))
    }) {
        return Err(StoreError::Invalid(format!(
            "slot {slot} is on `{connstr}`, which is not among the partitions given: every \
             partition holding slots must be listed (docs/distributed-sql.md#adding-a-partition)"
        )));
    }
    Ok(map)
}

/// One partition as the router's slot map names it.
pub(super) struct Partition {
    /// libpq `key=value` connection string, without credentials: where the partition is
    /// ([`place_of`]), then how the router checks it's talking to it ([`tls_options`]).
    pub(super) connstr: String,
    /// The hosts, without the database name or the TLS options.
    server: String,
    /// The TLS options.
    tls: String,
    user: String,
    password: Option<String>,
}

impl Partition {
    /// Every host of the URL (a Patroni pair's two, say) with `target_session_attrs` kept,
    /// so PL/Proxy's libpq follows a partition's failover as the store's own pool does.
    pub(super) fn parse(url: &str) -> Result<Partition, StoreError> {
        let database = crate::db::parse(url)?;
        let config = &database.config;
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
        if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
            parts.push("target_session_attrs=read-write".to_owned());
        }
        let server = parts.join(" ");
        if let Some(dbname) = config.get_dbname() {
            parts.push(format!("dbname={dbname}"));
        }
        let tls = tls_options(database.tls_params());
        let user = config
            .get_user()
            .ok_or_else(|| StoreError::Invalid("a partition URL names no user".into()))?
            .to_owned();
        let password = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        Ok(Partition {
            connstr: format!("{}{tls}", parts.join(" ")),
            server,
            tls,
            user,
            password,
        })
    }

    /// Where a parked slot points: this partition's server, a database that does not exist,
    /// so every call routed there fails (closed) until the slot is pointed somewhere again.
    pub(super) fn parked(&self, slot: usize) -> String {
        format!("{} dbname={PARKED}{slot}{}", self.server, self.tls)
    }
}

/// The router's TLS options to a partition, as its URL gives them to the store: `sslmode`
/// always (libpq's default is the store's), `sslrootcert` when given, a path the router's
/// server reads (`docs/distributed-sql.md#least-privilege`). The client certificate stays
/// the store's: the router logs in with its user mapping.
fn tls_options(params: &crate::db::TlsParams) -> String {
    let mut options = format!(" {SSLMODE}{}", params.mode.as_str());
    if let Some(root) = &params.root_cert {
        let root = root.display().to_string();
        options.push_str(&format!(
            " sslrootcert='{}'",
            root.replace('\\', "\\\\").replace('\'', "\\'")
        ));
    }
    options
}

/// Where [`tls_options`] start in a connection string: always the first of them.
const SSLMODE: &str = "sslmode=";

/// A slot map entry without its TLS options: which partition it names, whatever the
/// router was told about checking it (a router installed before it was told anything).
pub(super) fn place_of(connstr: &str) -> &str {
    connstr
        .split_once(&format!(" {SSLMODE}"))
        .map_or(connstr, |(place, _)| place)
}

/// The database a parked slot names ([`Partition::parked`]).
const PARKED: &str = "keyflight_parked_slot_";

/// Makes partition `index`'s fences its own residue class modulo [`SLOTS`], above `floor`:
/// unique across partitions (a fence names one claim in the whole mesh, as on one
/// database), and still increasing on each, and for every scope moved to it (whose fences
/// are all at most `floor`). Run once per partition; again, it checks the partition kept
/// its place (moving a partition moves its scopes: `docs/distributed-sql.md#adding-a-partition`).
pub(super) async fn own_fences(
    client: &Client,
    index: usize,
    floor: i64,
) -> Result<(), StoreError> {
    let stride = i64::try_from(SLOTS).unwrap_or(i64::MAX);
    let residue = i64::try_from(index).unwrap_or(i64::MAX) % stride;
    let increment: i64 = client
        .query_one(FENCE_INCREMENT_SQL, &[])
        .await?
        .try_get(0)?;
    // No fence above the sequence's `last_value` was handed out (`LAST_FENCE_SQL`).
    let last: i64 = client.query_one(LAST_FENCE_SQL, &[]).await?.try_get(0)?;
    let in_class = last.rem_euclid(stride) == (residue + 1) % stride;
    if increment == stride {
        if !in_class {
            return Err(StoreError::Invalid(format!(
                "partition {index} hands out another partition's fences: partitions must be \
                 named in the order they were first migrated"
            )));
        }
        if last > floor {
            return Ok(());
        }
    }
    // The first fence above every fence handed out so far and `floor`, in this class.
    let mut next = last.max(floor) + 1;
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
pub(super) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_named_with_the_tls_its_url_asks_for() {
        let verified = crate::db::TlsParams {
            mode: crate::db::SslMode::VerifyFull,
            root_cert: Some("/ca's.pem".into()),
            client: Some(("/c.pem".into(), "/k.pem".into())),
        };
        assert_eq!(
            tls_options(&verified),
            r" sslmode=verify-full sslrootcert='/ca\'s.pem'"
        );
        let plain = Partition::parse("postgres://app@db/records").unwrap();
        assert_eq!(
            plain.connstr,
            "host=db port=5432 dbname=records sslmode=prefer"
        );
        assert_eq!(
            plain.parked(3),
            format!("host=db port=5432 dbname={PARKED}3 sslmode=prefer")
        );
    }

    #[test]
    fn a_slot_names_its_partition_whatever_its_tls() {
        let place = "host=db port=5432 dbname=records";
        assert_eq!(place_of(place), place);
        assert_eq!(
            place_of(&format!("{place} sslmode=verify-full sslrootcert='/x'")),
            place
        );
    }
}
