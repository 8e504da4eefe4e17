//! A partitioned database's router (`store/partitions/`).

/// The schema version a router was installed for; `/readyz` compares it with the binary's.
pub const ROUTER_SCHEMA_SQL: &str = "SELECT keyflight_router_schema()";

/// The router's own objects: the hash PL/Proxy runs on a scope (its first four bytes as a
/// signed integer; PL/Proxy masks it to the slot count); and a `keyflight_records` that is
/// not a table. A lease-store started without `--partition-url` on the router (a rollback
/// to a release without partitions, a missing setting) would otherwise migrate it and serve
/// an empty table beside the partitions' records, running every request again; with this
/// view its migration fails (the name is taken), and every statement it runs fails closed
/// with the reason.
pub const ROUTER_SQL: &str = "
CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE OR REPLACE FUNCTION keyflight_partition(bytea) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT
    AS $$ SELECT ('x' || encode(substring($1 FROM 1 FOR 4), 'hex'))::bit(32)::integer $$;
CREATE OR REPLACE FUNCTION keyflight_router_holds_no_records() RETURNS bytea
    LANGUAGE plpgsql VOLATILE AS $$ BEGIN
    RAISE EXCEPTION 'this database is the PL/Proxy router of a partitioned keyflight database: it holds no records'
        USING HINT = 'run the lease-store with --partition-url for each partition (docs/distributed-sql.md)';
END $$;
CREATE OR REPLACE VIEW keyflight_records AS SELECT keyflight_router_holds_no_records() AS scope;";

/// Whether this database is a partitioned database's router: only the router has the
/// function that makes every record statement on it fail closed.
pub const IS_ROUTER_SQL: &str =
    "SELECT to_regprocedure('keyflight_router_holds_no_records()') IS NOT NULL";

/// `$1` the router's foreign server: its options, which name the slots' partitions.
pub const CLUSTER_OPTIONS_SQL: &str = "SELECT srvoptions FROM pg_foreign_server WHERE srvname = $1";

/// The fence sequence's stride on a partition.
pub const FENCE_INCREMENT_SQL: &str =
    "SELECT increment_by FROM pg_sequences WHERE sequencename = 'keyflight_fence_seq'";

/// The fence sequence's own row: `last_value` is the last fence handed out, or (not yet
/// called) the next one; either way no fence above it was handed out.
pub const LAST_FENCE_SQL: &str = "SELECT last_value FROM keyflight_fence_seq";
