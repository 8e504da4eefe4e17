//! The functions that carry a statement on a partitioned database: on each partition the
//! statement itself, on the router a PL/Proxy function of the same signature that runs it
//! where the scope lives (`docs/distributed-sql.md#what-runs-where`).

use tokio_postgres::Client;
use tokio_postgres::types::{Kind, Type};

use super::{CLUSTER, Routed, RunOn};
use crate::store::{PLANNER_SETTINGS, StoreError};

/// A function's signature, read from its statement prepared on a partition.
pub(super) struct Signature {
    /// Parameter types, in order.
    pub(super) params: Vec<String>,
    /// Returned columns (name, type); none for a statement without `RETURNING`.
    columns: Vec<(String, String)>,
}

impl Signature {
    pub(super) async fn of(client: &Client, routed: &Routed) -> Result<Signature, StoreError> {
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
    /// returning a row per row it changed, so the router's caller still counts them. The
    /// function is dropped first: `CREATE OR REPLACE` cannot change what a function returns,
    /// and a release may add a column to a statement's answer. Both run in one transaction,
    /// so a caller sees the old function or the new one.
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
        let params = self.params.join(", ");
        format!(
            "DROP FUNCTION IF EXISTS keyflight_{name}({params});\n\
             CREATE FUNCTION keyflight_{name}({params}) RETURNS {returns}"
        )
    }

    /// The partition's function: the statement itself, in PL/pgSQL so that its plan is
    /// cached for the session as a prepared statement's is (an SQL function is planned
    /// again on every call in Postgres 15). Its columns are the statement's, never the
    /// function's output variables of the same names (`use_column`). It is planned as
    /// the store's own sessions plan the statement ([`PLANNER_SETTINGS`]): PL/Proxy's
    /// sessions on the partition do not carry the store's settings.
    pub(super) fn on_partition(&self, routed: &Routed) -> String {
        let returning = match self.columns.is_empty() {
            true => " RETURNING 1",
            false => "",
        };
        let planner = PLANNER_SETTINGS
            .map(|(name, value)| format!(" SET {name} = {value}"))
            .concat();
        format!(
            "{} LANGUAGE plpgsql VOLATILE{planner} AS $keyflight$ #variable_conflict use_column\n\
             BEGIN RETURN QUERY {}{returning}; END $keyflight$;",
            self.head(routed.name),
            routed.sql
        )
    }

    /// The router's function: the same signature, run where the scope lives.
    pub(super) fn on_router(&self, routed: &Routed) -> String {
        let run_on = match routed.on {
            RunOn::Scope => "RUN ON keyflight_partition($1)",
            RunOn::All => "RUN ON ALL",
            RunOn::Split => "SPLIT ALL; RUN ON keyflight_partition($1)",
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
