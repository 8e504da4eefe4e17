//! Cleanup's hold of an abandoned at-most-once lease (`docs/records.md#a-lapsed-at-most-once-lease`,
//! `store/held.rs`).

/// `$1` batch size, `$2` the settle horizon in ms, `$3` whether lapses may be held now
/// (false during the takeover grace). The inner SELECT finds `pending` rows through V1's
/// `(state, created_at)` index; the outer UPDATE reaches each by its primary key, because
/// `(state || '')` is no index condition (`docs/records.md#the-indexes`).
pub const HOLD_ABANDONED_SQL: &str = "
UPDATE keyflight_records
   SET state = 'unknown', lease_expires_at = NULL, updated_at = clock_timestamp()
 WHERE scope IN (SELECT scope FROM keyflight_records
                  WHERE state = 'pending' AND at_most_once AND $3
                    AND lease_expires_at < now() - $2::bigint * interval '1 millisecond'
                    AND expires_at >= now()
                  LIMIT $1)
   AND (state || '') = 'pending' AND at_most_once AND $3
   AND lease_expires_at < clock_timestamp() - $2::bigint * interval '1 millisecond'
   AND expires_at >= clock_timestamp()
RETURNING scope, fence";
