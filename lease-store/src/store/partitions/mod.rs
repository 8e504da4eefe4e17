//! L9: a partitioned database — the records spread over several Postgres clusters, behind
//! a PL/Proxy router (`docs/distributed-sql.md#plproxy-partitioned-postgres`).
//!
//! Every statement the store runs on one scope is also installed, verbatim, as a function
//! `keyflight_<name>` on each partition (`RETURN QUERY` in PL/pgSQL, so its plan is cached
//! per session), and as a PL/Proxy function of the same
//! signature on the router database, which runs it on the partition that owns the scope
//! (`RUN ON keyflight_partition($1)`). A statement over all records (cleanup, the epoch, the
//! operator's list) runs on every partition (`RUN ON ALL`) and the store combines the rows.
//! A store serving a partitioned database sends the router the call
//! ([`Routed::call`]) instead of the statement; nothing else in it changes, so each claim
//! still runs whole, with single-node semantics, on one partition. A group-commit batch
//! (`batch/`) is split by partition (PL/Proxy's `SPLIT`, [`RunOn::Split`]): each partition
//! runs its share as one statement, so a batch is one transaction per partition it touches,
//! never one across partitions. A call on two scopes (a claim across a recipe change)
//! runs on both partitions in turn (`dual/across_partitions.rs`).
//!
//! The functions are generated from the statements themselves when `lease-store migrate`
//! runs with partitions ([`install`]): each statement is prepared on the first partition
//! and its parameter and column types become the function's signature, so a statement and
//! its function cannot drift apart.
//!
//! The router maps a scope to one of [`SLOTS`] slots by its first four bytes (a SHA-256:
//! uniform), and each slot to a partition; PL/Proxy opens one connection per partition, not
//! per slot. Adding a partition is moving slots (`docs/distributed-sql.md#adding-a-partition`).

mod function;
mod install;
mod move_slot;

use std::sync::OnceLock;

use tokio_postgres::Client;

use super::StoreError;

pub use install::{PartitionedReport, RuntimeRole, migrate_partitioned};
use keyflight_store_core::sql::partitions::{IS_ROUTER_SQL, ROUTER_SCHEMA_SQL};
pub use move_slot::{MoveReport, move_slot};

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
    /// A batch: every parameter is an array with one element per call, and `$1` holds the
    /// scopes. PL/Proxy splits the arrays by the partition of each scope and runs the
    /// statement once on each partition that owns one, in parallel and each in its own
    /// transaction; the rows come back concatenated.
    Split,
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

    /// A batch statement over arrays of calls, split by partition ([`RunOn::Split`]).
    pub const fn split(name: &'static str, sql: &'static str) -> Routed {
        Routed {
            name,
            sql,
            on: RunOn::Split,
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
pub(super) fn parameter_count(sql: &str) -> usize {
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
pub fn routed() -> [&'static Routed; 26] {
    use super::{
        batch, claim, dual, epoch, held, lease, orphan, reconciled, records, retention, usage,
        watch,
    };
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
        &orphan::GIVE_BACK,
        &records::GET,
        &records::RESOLVE_COMPLETED,
        &records::RESOLVE_FAILED,
        &records::ERASE,
        &records::AUDIT,
        &records::LIST,
        &reconciled::RECONCILED_COMMITTED,
        &reconciled::RECONCILED_ABSENT,
        &epoch::EPOCH,
        &retention::DELETE_EXPIRED,
        &held::HOLD_ABANDONED,
        &batch::CLAIM_BATCH,
        &batch::FINALIZE_BATCH,
        &dual::HOLD_FOR_SETTLE,
        &usage::WORKLOAD_USAGE,
    ]
}

/// The slot of a scope: its first four bytes, big-endian, as PL/Proxy masks the router's
/// `keyflight_partition` hash (`install.rs`).
pub fn slot_of(scope: &[u8]) -> usize {
    let mut head = [0u8; 4];
    for (to, from) in head.iter_mut().zip(scope) {
        *to = *from;
    }
    u32::from_be_bytes(head) as usize % SLOTS
}

/// Refuses a partitioned database's router where one database is expected (a store or a
/// `migrate` without `--partition-url`): it holds no records, and migrating it would make
/// an empty table beside the partitions' records (`install.rs` makes every statement on it
/// fail closed, for releases that do not ask).
pub(super) async fn refuse_router(client: &Client) -> Result<(), StoreError> {
    let router: bool = client.query_one(IS_ROUTER_SQL, &[]).await?.try_get(0)?;
    match router {
        true => Err(StoreError::Invalid(
            "this database is the PL/Proxy router of a partitioned keyflight database: give \
             the lease-store each partition with --partition-url (docs/distributed-sql.md)"
                .into(),
        )),
        false => Ok(()),
    }
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
