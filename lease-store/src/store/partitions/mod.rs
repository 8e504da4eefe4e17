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

use tokio_postgres::Client;

use super::StoreError;

pub use install::{PartitionedReport, RuntimeRole, migrate_partitioned};
pub use keyflight_store_core::routed::{Routed, RunOn, all as routed};
use keyflight_store_core::sql::partitions::{IS_ROUTER_SQL, ROUTER_SCHEMA_SQL};
pub use move_slot::{MoveReport, move_slot};

/// How many slots the router hashes scopes into: a power of two (PL/Proxy's rule), and
/// enough that slots spread evenly over any partition count an operator is likely to run.
pub const SLOTS: usize = 64;

/// The PL/Proxy cluster (a foreign server on the router) naming the slots' partitions.
const CLUSTER: &str = "keyflight_partitions";

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
    fn a_scope_s_slot_is_its_first_four_bytes_modulo_the_slots() {
        assert_eq!(slot_of(&[0, 0, 0, 5, 9]), 5);
        assert_eq!(slot_of(&[0xff, 0xff, 0xff, 0xff]), SLOTS - 1);
        assert_eq!(slot_of(&[0, 0, 1, 0]), 256 % SLOTS);
    }
}
