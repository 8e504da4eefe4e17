//! Group commit: many claims or finalizes in one statement (`store/batch/`).

/// `$1` scopes, `$2` fingerprints, `$3` claim ids, `$4` lease ms, `$5`
/// retention ms, `$6` at-most-once, `$7` workloads (`NULL`: a bearer caller), one element
/// per call, sorted by scope.
pub const CLAIM_BATCH_SQL: &str = "
INSERT INTO keyflight_records
    (scope, state, fingerprint, claim_id, fence, lease_expires_at,
     created_at, retention, expires_at, at_most_once, updated_at, workload)
SELECT c.scope, 'pending', c.fingerprint, c.claim_id, nextval('keyflight_fence_seq'),
       clock_timestamp() + c.lease_ms * interval '1 millisecond',
       clock_timestamp(), c.retention_ms * interval '1 millisecond',
       clock_timestamp() + c.retention_ms * interval '1 millisecond',
       c.at_most_once, clock_timestamp(), c.workload
  FROM unnest($1::bytea[], $2::bytea[], $3::uuid[], $4::bigint[], $5::bigint[],
              $6::boolean[], $7::text[])
       AS c(scope, fingerprint, claim_id, lease_ms, retention_ms, at_most_once, workload)
 ORDER BY c.scope
ON CONFLICT (scope) DO NOTHING
RETURNING scope, fence";

/// `$1` scopes, `$2` claim ids, `$3` statuses, `$4` headers, `$5` bodies, `$6`
/// replayable, one element per call, sorted by scope.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
pub const FINALIZE_BATCH_SQL: &str = "
UPDATE keyflight_records r
   SET state = 'completed', lease_expires_at = NULL,
       response_status = f.status, response_headers = f.headers, response_body = f.body,
       replayable = f.replayable, updated_at = clock_timestamp()
  FROM unnest($1::bytea[], $2::uuid[], $3::integer[], $4::jsonb[], $5::bytea[], $6::boolean[])
       AS f(scope, claim_id, status, headers, body, replayable)
 WHERE r.scope = f.scope AND r.claim_id = f.claim_id AND (r.state || '') = 'pending'
RETURNING r.scope";
