//! The operator epoch (`store/epoch.rs`).

/// The operator epoch edges check their replay cache against (F9): one primary-key lookup
/// on a one-row table.
pub const EPOCH_SQL: &str = "SELECT epoch FROM keyflight_operator_epoch";

/// [`EPOCH_SQL`] on a partitioned database's router: the mesh-wide epoch is the sum of every
/// partition's. Each only grows, so the sum grows with any of them.
pub const EPOCH_ROUTER_SQL: &str =
    "SELECT COALESCE(sum(epoch), 0)::bigint AS epoch FROM keyflight_epoch()";
