//! What each workload keeps (`docs/records.md#storage-quota`, `store/usage.rs`).

/// Rows per workload (`NULL`: bearer-token callers and records a release before V11 made)
/// and the bytes of their recorded bodies as the workload sent them (`octet_length` reads a
/// compressed body's size from its header). A table never analyzed (`reltuples` -1) is read
/// whole. A sample scan is planned whatever the session's `enable_seqscan`. Beside them,
/// each workload's records in `unknown`, counted exactly: they are few, read from the
/// `(state, created_at)` index, and what the operator's queue must match
/// (`docs/console.md#what-it-shows`). The workload is joined as `''` for none: a full join
/// needs an equality.
pub const WORKLOAD_USAGE_SQL: &str = "
WITH sample AS (
    SELECT LEAST(100, 100 * 1000000 / GREATEST(reltuples, 1))::float8 AS percent
      FROM pg_class
     WHERE oid = 'keyflight_records'::regclass
), sampled AS (
    SELECT COALESCE(workload, '') AS named,
           round(count(*) * 100 / (SELECT percent FROM sample))::bigint AS records,
           round(COALESCE(sum(octet_length(response_body)), 0) * 100
                 / (SELECT percent FROM sample))::bigint AS bytes
      FROM keyflight_records TABLESAMPLE SYSTEM ((SELECT percent FROM sample))
     GROUP BY workload
), unknown AS (
    SELECT COALESCE(workload, '') AS named, count(*)::bigint AS unknown
      FROM keyflight_records
     WHERE state = 'unknown'
     GROUP BY workload
)
SELECT NULLIF(named, '') AS workload,
       GREATEST(COALESCE(sampled.records, 0), COALESCE(unknown.unknown, 0))::bigint AS records,
       COALESCE(sampled.bytes, 0)::bigint AS bytes,
       COALESCE(unknown.unknown, 0)::bigint AS unknown
  FROM sampled FULL JOIN unknown USING (named)";

/// [`WORKLOAD_USAGE_SQL`] over every partition, summed, as the router runs it.
pub const WORKLOAD_USAGE_ROUTER_SQL: &str = "
SELECT workload, sum(records)::bigint AS records, sum(bytes)::bigint AS bytes,
       sum(unknown)::bigint AS unknown
  FROM keyflight_workload_usage()
 GROUP BY workload";
