//! What each workload keeps (`docs/records.md#storage-quota`, `store/usage.rs`).

/// Rows per workload (`NULL`: bearer-token callers and records a release before V11 made)
/// and the bytes of their recorded bodies as the workload sent them (`octet_length` reads a
/// compressed body's size from its header). A table never analyzed (`reltuples` -1) is read
/// whole. A sample scan is planned whatever the session's `enable_seqscan`.
pub const WORKLOAD_USAGE_SQL: &str = "
WITH sample AS (
    SELECT LEAST(100, 100 * 1000000 / GREATEST(reltuples, 1))::float8 AS percent
      FROM pg_class
     WHERE oid = 'keyflight_records'::regclass
)
SELECT workload,
       round(count(*) * 100 / (SELECT percent FROM sample))::bigint AS records,
       round(COALESCE(sum(octet_length(response_body)), 0) * 100
             / (SELECT percent FROM sample))::bigint AS bytes
  FROM keyflight_records TABLESAMPLE SYSTEM ((SELECT percent FROM sample))
 GROUP BY workload";

/// [`WORKLOAD_USAGE_SQL`] over every partition, summed, as the router runs it.
pub const WORKLOAD_USAGE_ROUTER_SQL: &str = "
SELECT workload, sum(records)::bigint AS records, sum(bytes)::bigint AS bytes
  FROM keyflight_workload_usage()
 GROUP BY workload";
