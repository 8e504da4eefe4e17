//! Retention cleanup (`docs/records.md#retention-and-cleanup`, `store/retention.rs`).

/// `$1` batch size, `$2` the settle horizon in ms, `$3` whether `pending` rows
/// may go at all (false during the takeover grace). The inner SELECT compares
/// with `now()` (the statement's start, stable), so `expires_at < now()` is a
/// range scan of migration V2's partial index; `clock_timestamp()` is volatile
/// and would force a full scan. The outer DELETE re-checks with
/// `clock_timestamp()` on the row it is about to delete: that re-check is what
/// the race argument above rests on. (A `pending` row always has a
/// `lease_expires_at`: V1's CHECK.)
pub const DELETE_EXPIRED_SQL: &str = "
DELETE FROM keyflight_records
 WHERE scope IN (SELECT scope FROM keyflight_records
                  WHERE expires_at < now()
                    AND state IN ('completed', 'failed', 'pending')
                    AND (state <> 'pending'
                         OR ($3 AND lease_expires_at
                                    < now() - $2::bigint * interval '1 millisecond'))
                  LIMIT $1)
   AND expires_at < clock_timestamp()
   AND state IN ('completed', 'failed', 'pending')
   AND (state <> 'pending'
        OR ($3 AND lease_expires_at
                   < clock_timestamp() - $2::bigint * interval '1 millisecond'))";
