//! Every statement the lease-store runs, one module per concern, as plain `&str` values:
//! the lease-store binds their parameters and runs them, the model mirrors them and pins each
//! by value (`model/tests/sql_pinned.rs`), and bench's pgbench runs them without the server.

pub mod batch;
pub mod claim;
pub mod dual;
pub mod epoch;
pub mod held;
pub mod lease;
pub mod listener;
pub mod migrate;
pub mod orphan;
pub mod partitions;
pub mod privilege;
pub mod reconciled;
pub mod records;
pub mod retention;
pub mod usage;
pub mod watch;

/// Each statement as its path under this module, with its value.
macro_rules! listed {
    ($($module:ident::$name:ident),* $(,)?) => {
        [$((concat!(stringify!($module), "::", stringify!($name)), $module::$name)),*]
    };
}

/// Every statement above by its path under this module, for the pin by value
/// (`model/tests/sql_pinned.rs`, `docs/model.md#keeping-the-mirror-honest`).
pub const STATEMENTS: [(&str, &str); 46] = listed![
    batch::CLAIM_BATCH_SQL,
    batch::FINALIZE_BATCH_SQL,
    claim::CLAIM_SQL,
    claim::HOLD_LAPSED_SQL,
    claim::READ_SQL,
    dual::BOTH_HELD_SQL,
    dual::HOLD_FOR_SETTLE_SQL,
    dual::NONE_TAKEN_SQL,
    epoch::EPOCH_ROUTER_SQL,
    epoch::EPOCH_SQL,
    held::HOLD_ABANDONED_SQL,
    lease::FINALIZE_SQL,
    lease::OWNER_SQL,
    lease::RELEASE_COOLDOWN_SQL,
    lease::RELEASE_FORGET_SQL,
    lease::RELEASE_UNKNOWN_SQL,
    lease::RENEW_SQL,
    listener::LIVENESS_SQL,
    migrate::TABLE_EXISTS_SQL,
    orphan::GIVE_BACK_SQL,
    orphan::RELEASE_ORPHAN_SQL,
    partitions::CLUSTER_OPTIONS_SQL,
    partitions::FENCE_INCREMENT_SQL,
    partitions::IS_ROUTER_SQL,
    partitions::LAST_FENCE_SQL,
    partitions::ROUTER_SCHEMA_SQL,
    partitions::ROUTER_SQL,
    privilege::CURRENT_USER_SQL,
    privilege::EXCESS_PRIVILEGES_SQL,
    privilege::FUNCTIONS_OWNED_SQL,
    privilege::MISSING_GRANTS_SQL,
    privilege::ROUTER_EXCESS_SQL,
    privilege::SCHEMA_SQL,
    reconciled::RECONCILED_ABSENT_SQL,
    reconciled::RECONCILED_COMMITTED_SQL,
    records::AUDIT_SQL,
    records::ERASE_SQL,
    records::GET_SQL,
    records::LIST_ROUTER_SQL,
    records::LIST_SQL,
    records::RESOLVE_COMPLETED_SQL,
    records::RESOLVE_FAILED_SQL,
    retention::DELETE_EXPIRED_SQL,
    usage::WORKLOAD_USAGE_ROUTER_SQL,
    usage::WORKLOAD_USAGE_SQL,
    watch::WATCH_SQL,
];

#[cfg(test)]
mod tests {
    use super::STATEMENTS;

    /// A statement added to a module without a row in [`STATEMENTS`] would escape the pin.
    #[test]
    fn every_statement_of_every_module_is_listed() {
        let sources = [
            ("batch", include_str!("batch.rs")),
            ("claim", include_str!("claim.rs")),
            ("dual", include_str!("dual.rs")),
            ("epoch", include_str!("epoch.rs")),
            ("held", include_str!("held.rs")),
            ("lease", include_str!("lease.rs")),
            ("listener", include_str!("listener.rs")),
            ("migrate", include_str!("migrate.rs")),
            ("orphan", include_str!("orphan.rs")),
            ("partitions", include_str!("partitions.rs")),
            ("privilege", include_str!("privilege.rs")),
            ("reconciled", include_str!("reconciled.rs")),
            ("records", include_str!("records.rs")),
            ("retention", include_str!("retention.rs")),
            ("usage", include_str!("usage.rs")),
            ("watch", include_str!("watch.rs")),
        ];
        let modules: Vec<&str> = include_str!("mod.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub mod "))
            .filter_map(|rest| rest.strip_suffix(';'))
            .collect();
        let read: Vec<&str> = sources.iter().map(|(module, _)| *module).collect();
        assert_eq!(modules, read, "a module this test does not read");
        let mut declared: Vec<String> = sources
            .iter()
            .flat_map(|(module, text)| {
                text.lines()
                    .filter_map(|line| line.strip_prefix("pub const "))
                    .filter_map(|rest| rest.split_once(": &str"))
                    .map(move |(name, _)| format!("{module}::{name}"))
            })
            .collect();
        declared.sort();
        let mut listed: Vec<&str> = STATEMENTS.iter().map(|(name, _)| *name).collect();
        listed.sort();
        assert_eq!(
            declared, listed,
            "STATEMENTS lacks a statement a module declares"
        );
    }
}
