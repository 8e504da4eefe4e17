//! The operator's record calls: list, get, resolve and erase, and a record's audit rows
//! (`docs/records.md#operators`, `store/records.rs`).

/// The summary columns, shared by list and get.
macro_rules! summary_columns {
    () => {
        "scope, state, fingerprint, fence, replayable, response_status, workload,
         to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS created_at,
         to_char(lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
             AS lease_expires_at,
         to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS expires_at"
    };
}

/// `$1` state or NULL for all, `$2` limit. Newest first.
///
/// Each state's newest are read from the `(state, created_at DESC)` index and only
/// those are merged, so a list reads at most `$2` rows per state however large the
/// table (`docs/records.md#the-indexes`). The states are the table's `CHECK`
/// (migration V1); `every_state_is_listed` in the store tests holds the two together.
pub const LIST_SQL: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM unnest(CASE WHEN $1::text IS NULL
                       THEN ARRAY['pending', 'completed', 'failed', 'unknown']
                       ELSE ARRAY[$1::text] END) AS wanted(listed_state)
     CROSS JOIN LATERAL (
           SELECT * FROM keyflight_records r
            WHERE r.state = wanted.listed_state
            ORDER BY r.created_at DESC
            LIMIT $2) AS r
     ORDER BY r.created_at DESC
     LIMIT $2"
);

/// [`LIST_SQL`] on a partitioned database's router: every partition's newest, merged,
/// ordered and cut as one database's list.
pub const LIST_ROUTER_SQL: &str =
    "SELECT * FROM keyflight_list($1, $2) ORDER BY created_at DESC LIMIT $2";

/// `$1` scope.
pub const GET_SQL: &str = concat!(
    "SELECT ",
    summary_columns!(),
    ", response_headers, response_body FROM keyflight_records WHERE scope = $1"
);

/// `$1` scope: the newest 100 rows of the operator audit about it (an operator's or a
/// reconciler's decisions), newest first, for the console's record page; read from the
/// audit's index on `(scope, id)` (migration V12, `docs/records.md#the-indexes`).
pub const AUDIT_SQL: &str = "
SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS at,
       actor, action, reason, response_sha256
  FROM keyflight_operator_audit
 WHERE scope = $1
 ORDER BY id DESC
 LIMIT 100";

/// `$1` scope, `$2` status, `$3` headers, `$4` body (NULLs: not replayable),
/// `$5` actor, `$6` reason, `$7` the response's digest.
/// `state_before` reads the statement's snapshot, i.e. the state before the
/// update, so one statement tells "resolved", "not unknown" and "not found" apart.
/// The audit row is appended by the owner's function (migration V9), which the runtime role
/// may call but not bypass; a `SELECT` in `WITH` runs only when read, so `resolved` is
/// counted through `audited`, one row per resolved record.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
pub const RESOLVE_COMPLETED_SQL: &str = "
WITH resolved AS (
    UPDATE keyflight_records
       SET state = 'completed', lease_expires_at = NULL,
           response_status = $2::integer, response_headers = $3::jsonb, response_body = $4::bytea,
           replayable = $4::bytea IS NOT NULL, updated_at = clock_timestamp()
     WHERE scope = $1 AND (state || '') = 'unknown'
    RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($5::text, 'resolve_completed', scope, $6::text, $7::bytea)
      FROM resolved
)
SELECT (SELECT count(*) FROM audited) AS resolved,
       (SELECT state FROM keyflight_records WHERE scope = $1) AS state_before";

/// `$1` scope, `$2` actor, `$3` reason. The cooldown ends now, so the next
/// same-fingerprint claim steals. Audited as [`RESOLVE_COMPLETED_SQL`] is.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
pub const RESOLVE_FAILED_SQL: &str = "
WITH resolved AS (
    UPDATE keyflight_records
       SET state = 'failed', lease_expires_at = clock_timestamp(),
           response_status = NULL, response_headers = NULL, response_body = NULL,
           updated_at = clock_timestamp()
     WHERE scope = $1 AND (state || '') = 'unknown'
    RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($2::text, 'resolve_failed', scope, $3::text, NULL)
      FROM resolved
)
SELECT (SELECT count(*) FROM audited) AS resolved,
       (SELECT state FROM keyflight_records WHERE scope = $1) AS state_before";

/// `$1` scope, `$2` actor, `$3` reason. Audited as [`RESOLVE_COMPLETED_SQL`] is.
pub const ERASE_SQL: &str = "
WITH erased AS (
    DELETE FROM keyflight_records WHERE scope = $1 RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($2::text, 'erase', scope, $3::text, NULL)
      FROM erased
)
SELECT count(*) AS erased FROM audited";
