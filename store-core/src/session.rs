//! The settings every session of the store starts with, which the bench's pgbench baseline
//! starts with too.

/// Every statement the store runs on its hot path finds its rows through an index, so its
/// sessions never plan a sequential scan where an index serves: a plan cached while the
/// table was young would keep scanning it as it grows
/// (`docs/postgres-facts.md#plans-made-on-a-young-table`).
/// JIT is off because a statement that has only a sequential scan to use (a one-row
/// table, a catalog, the epoch trigger's update) is then costed past JIT's thresholds,
/// and compiling never pays off for statements that each touch a few rows.
/// Each prepared statement is planned once, generically: the default would plan a batch
/// statement again on every run, for the length of its arrays
/// (`docs/postgres-facts.md#plans-made-on-a-young-table`).
pub const PLANNER_SETTINGS: [(&str, &str); 3] = [
    ("enable_seqscan", "off"),
    ("jit", "off"),
    ("plan_cache_mode", "force_generic_plan"),
];

/// [`PLANNER_SETTINGS`] as a connection's `options` (libpq's `PGOPTIONS`) spell them: the
/// store's pooled sessions and the bench's pgbench baseline start with them.
pub fn planner_options() -> String {
    PLANNER_SETTINGS
        .map(|(name, value)| format!("-c {name}={value}"))
        .join(" ")
}
