//! Every statement a partitioned database runs, and how (`docs/distributed-sql.md#plproxy-partitioned-postgres`):
//! on the partition that owns the scope in `$1`, on every partition, or split by partition.
//! Pure data beside the statements it names: the store's modules run them, and
//! `lease-store`'s partition installer makes a function of each, so neither imports the
//! other to find them.

use std::sync::OnceLock;

use crate::sql::batch::{CLAIM_BATCH_SQL, FINALIZE_BATCH_SQL};
use crate::sql::claim::{CLAIM_SQL, READ_SQL};
use crate::sql::dual::HOLD_FOR_SETTLE_SQL;
use crate::sql::epoch::{EPOCH_ROUTER_SQL, EPOCH_SQL};
use crate::sql::held::HOLD_ABANDONED_SQL;
use crate::sql::lease::{
    FINALIZE_SQL, OWNER_SQL, RELEASE_COOLDOWN_SQL, RELEASE_FORGET_SQL, RELEASE_UNKNOWN_SQL,
    RENEW_SQL,
};
use crate::sql::orphan::{GIVE_BACK_SQL, RELEASE_ORPHAN_SQL};
use crate::sql::reconciled::{RECONCILED_ABSENT_SQL, RECONCILED_COMMITTED_SQL};
use crate::sql::records::{
    AUDIT_SQL, ERASE_SQL, GET_SQL, LIST_ROUTER_SQL, LIST_SQL, RESOLVE_COMPLETED_SQL,
    RESOLVE_FAILED_SQL,
};
use crate::sql::retention::DELETE_EXPIRED_SQL;
use crate::sql::usage::{WORKLOAD_USAGE_ROUTER_SQL, WORKLOAD_USAGE_SQL};
use crate::sql::watch::WATCH_SQL;

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
pub fn parameter_count(sql: &str) -> usize {
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

/// [`CLAIM_SQL`] on a partitioned database.
pub static CLAIM: Routed = Routed::by_scope("claim", CLAIM_SQL);

/// [`READ_SQL`] on a partitioned database. Named `read_record` since it returns the fence:
/// a function's columns cannot change in place, and replicas of the previous release still
/// call `keyflight_read` while they roll.
pub static READ: Routed = Routed::by_scope("read_record", READ_SQL);

/// [`WATCH_SQL`] on a partitioned database.
pub static WATCH: Routed = Routed::by_scope("watch", WATCH_SQL);

/// [`RENEW_SQL`] on a partitioned database.
pub static RENEW: Routed = Routed::by_scope("renew", RENEW_SQL);

/// [`FINALIZE_SQL`] on a partitioned database.
pub static FINALIZE: Routed = Routed::by_scope("finalize", FINALIZE_SQL);

/// [`RELEASE_COOLDOWN_SQL`] on a partitioned database.
pub static RELEASE_COOLDOWN: Routed = Routed::by_scope("release_cooldown", RELEASE_COOLDOWN_SQL);

/// [`RELEASE_UNKNOWN_SQL`] on a partitioned database.
pub static RELEASE_UNKNOWN: Routed = Routed::by_scope("release_unknown", RELEASE_UNKNOWN_SQL);

/// [`RELEASE_FORGET_SQL`] on a partitioned database.
pub static RELEASE_FORGET: Routed = Routed::by_scope("release_forget", RELEASE_FORGET_SQL);

/// [`OWNER_SQL`] on a partitioned database.
pub static OWNER: Routed = Routed::by_scope("owner", OWNER_SQL);

/// [`RELEASE_ORPHAN_SQL`] on a partitioned database.
pub static RELEASE_ORPHAN: Routed = Routed::by_scope("release_orphan", RELEASE_ORPHAN_SQL);

/// [`GIVE_BACK_SQL`] on a partitioned database.
pub static GIVE_BACK: Routed = Routed::by_scope("give_back", GIVE_BACK_SQL);

/// [`GET_SQL`] on a partitioned database.
pub static GET: Routed = Routed::by_scope("get", GET_SQL);

/// [`RESOLVE_COMPLETED_SQL`] on a partitioned database.
pub static RESOLVE_COMPLETED: Routed = Routed::by_scope("resolve_completed", RESOLVE_COMPLETED_SQL);

/// [`RESOLVE_FAILED_SQL`] on a partitioned database.
pub static RESOLVE_FAILED: Routed = Routed::by_scope("resolve_failed", RESOLVE_FAILED_SQL);

/// [`ERASE_SQL`] on a partitioned database.
pub static ERASE: Routed = Routed::by_scope("erase", ERASE_SQL);

/// [`AUDIT_SQL`] on a partitioned database.
pub static AUDIT: Routed = Routed::by_scope("audit", AUDIT_SQL);

/// [`LIST_SQL`] on a partitioned database: every partition's newest, merged, ordered and
/// cut as one database's list.
pub static LIST: Routed = Routed::on_all("list", LIST_SQL, Some(LIST_ROUTER_SQL));

/// [`RECONCILED_COMMITTED_SQL`] on a partitioned database.
pub static RECONCILED_COMMITTED: Routed =
    Routed::by_scope("reconciled_committed", RECONCILED_COMMITTED_SQL);

/// [`RECONCILED_ABSENT_SQL`] on a partitioned database.
pub static RECONCILED_ABSENT: Routed = Routed::by_scope("reconciled_absent", RECONCILED_ABSENT_SQL);

/// [`EPOCH_SQL`] on a partitioned database: the mesh-wide epoch is the
/// sum of every partition's. Each only grows, so the sum grows with any of them: an erase on
/// any partition changes it.
pub static EPOCH: Routed = Routed::on_all("epoch", EPOCH_SQL, Some(EPOCH_ROUTER_SQL));

/// [`DELETE_EXPIRED_SQL`] on a partitioned database: up to the batch on
/// every partition.
pub static DELETE_EXPIRED: Routed = Routed::on_all("delete_expired", DELETE_EXPIRED_SQL, None);

/// [`HOLD_ABANDONED_SQL`] on a partitioned database: up to the batch on
/// every partition.
pub static HOLD_ABANDONED: Routed = Routed::on_all("hold_abandoned", HOLD_ABANDONED_SQL, None);

/// [`CLAIM_BATCH_SQL`] on a partitioned database: each partition inserts its share.
pub static CLAIM_BATCH: Routed = Routed::split("claim_batch", CLAIM_BATCH_SQL);

/// [`FINALIZE_BATCH_SQL`] on a partitioned database: each partition updates its share.
pub static FINALIZE_BATCH: Routed = Routed::split("finalize_batch", FINALIZE_BATCH_SQL);

/// [`HOLD_FOR_SETTLE_SQL`], routed to the scope's partition.
pub static HOLD_FOR_SETTLE: Routed = Routed::by_scope("hold_for_settle", HOLD_FOR_SETTLE_SQL);

/// [`WORKLOAD_USAGE_SQL`] on a partitioned database: every partition's rows, summed.
pub static WORKLOAD_USAGE: Routed = Routed::on_all(
    "workload_usage",
    WORKLOAD_USAGE_SQL,
    Some(WORKLOAD_USAGE_ROUTER_SQL),
);

/// Every statement a partitioned database runs, in the order their functions are installed.
pub fn all() -> [&'static Routed; 26] {
    [
        &CLAIM,
        &READ,
        &WATCH,
        &RENEW,
        &FINALIZE,
        &RELEASE_COOLDOWN,
        &RELEASE_UNKNOWN,
        &RELEASE_FORGET,
        &OWNER,
        &RELEASE_ORPHAN,
        &GIVE_BACK,
        &GET,
        &RESOLVE_COMPLETED,
        &RESOLVE_FAILED,
        &ERASE,
        &AUDIT,
        &LIST,
        &RECONCILED_COMMITTED,
        &RECONCILED_ABSENT,
        &EPOCH,
        &DELETE_EXPIRED,
        &HOLD_ABANDONED,
        &CLAIM_BATCH,
        &FINALIZE_BATCH,
        &HOLD_FOR_SETTLE,
        &WORKLOAD_USAGE,
    ]
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
        let mut names: Vec<&str> = all().iter().map(|r| r.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all().len());
    }
}
