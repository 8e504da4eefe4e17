//! Migrations and the schema check of `/readyz` (`store/migrate.rs`).

/// `$1` a table's name: whether it exists (the migration history, before any migration).
pub const TABLE_EXISTS_SQL: &str = "SELECT to_regclass($1) IS NOT NULL";
