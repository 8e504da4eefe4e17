//! A won claim's renew and settle calls, each fenced by its claim id, and the read that
//! tells a settle that matched nothing whether it had already landed (`store/lease.rs`).

/// `$1` scope, `$2` claim id, `$3` lease ms.
pub const RENEW_SQL: &str = "
UPDATE keyflight_records
   SET lease_expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond',
       updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'";

/// `$1` scope, `$2` claim id, `$3` status, `$4` headers, `$5` body, `$6` replayable.
pub const FINALIZE_SQL: &str = "
UPDATE keyflight_records
   SET state = 'completed', lease_expires_at = NULL,
       response_status = $3, response_headers = $4, response_body = $5,
       replayable = $6, updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'";

/// `$1` scope, `$2` claim id, `$3` cooldown ms. The fingerprint stays, so only
/// the same request may retry after the cooldown (the claim's `steal` branch).
/// Every release returns when it was applied and when its cooldown ends, on the
/// database's clock (`Released`).
pub const RELEASE_COOLDOWN_SQL: &str = "
UPDATE keyflight_records
   SET state = 'failed',
       lease_expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond',
       updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'
RETURNING updated_at, lease_expires_at";

/// `$1` scope, `$2` claim id.
pub const RELEASE_UNKNOWN_SQL: &str = "
UPDATE keyflight_records
   SET state = 'unknown', lease_expires_at = NULL, updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'
RETURNING updated_at, lease_expires_at";

/// `$1` scope, `$2` claim id.
pub const RELEASE_FORGET_SQL: &str = "
DELETE FROM keyflight_records
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'
RETURNING clock_timestamp() AS updated_at, NULL::timestamptz AS lease_expires_at";

/// `$1` scope: who owns the record now and in which state (and since when, and until
/// when it cools down), read after a fenced write matched nothing, to tell a repeat from
/// a lost lease.
pub const OWNER_SQL: &str = "
SELECT claim_id, state, updated_at, lease_expires_at FROM keyflight_records WHERE scope = $1";
