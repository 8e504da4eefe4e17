//! The service's report on an `unknown` record under `uncertain: reconcile`
//! (`docs/reconcile.md#the-rule`, `store/reconciled.rs`).

/// `$1` scope, `$2` fence, `$3` fingerprint, `$4` status, `$5` headers, `$6` body, `$7`
/// actor, `$8` the response's digest. As `records.rs`' resolve: `state_before` reads the
/// statement's snapshot, so one statement tells "settled", "not unknown at this fence" and
/// "not found" apart; `(state || '')` keeps the lookup on the primary key.
pub const RECONCILED_COMMITTED_SQL: &str = "
WITH settled AS (
    UPDATE keyflight_records
       SET state = 'completed', lease_expires_at = NULL,
           response_status = $4::integer, response_headers = $5::jsonb, response_body = $6::bytea,
           replayable = true, updated_at = clock_timestamp()
     WHERE scope = $1 AND (state || '') = 'unknown' AND fence = $2 AND fingerprint = $3
    RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($7::text, 'reconciled_committed', scope,
               'the service answered committed for fence ' || $2::bigint, $8::bytea)
      FROM settled
)
SELECT (SELECT count(*) FROM audited) AS settled,
       (SELECT state FROM keyflight_records WHERE scope = $1) AS state_before";

/// `$1` scope, `$2` fence, `$3` fingerprint, `$4` actor. The cooldown ends now, so the next
/// same-fingerprint claim runs under a higher fence, which the service's ledger admits.
pub const RECONCILED_ABSENT_SQL: &str = "
WITH settled AS (
    UPDATE keyflight_records
       SET state = 'failed', lease_expires_at = clock_timestamp(),
           response_status = NULL, response_headers = NULL, response_body = NULL,
           updated_at = clock_timestamp()
     WHERE scope = $1 AND (state || '') = 'unknown' AND fence = $2 AND fingerprint = $3
    RETURNING scope
), audited AS (
    SELECT keyflight_operator_audit_append($4::text, 'reconciled_absent', scope,
               'the service answered absent and fenced out fence ' || $2::bigint, NULL)
      FROM settled
)
SELECT (SELECT count(*) FROM audited) AS settled,
       (SELECT state FROM keyflight_records WHERE scope = $1) AS state_before";
