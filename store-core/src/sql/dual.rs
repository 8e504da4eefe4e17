//! Claims across a recipe change, one transaction over two records
//! (`docs/records.md#claims-across-a-recipe-change`, `store/dual/`).

/// `$1`, `$2` the two scopes, `$3` the claim id: fails (division by zero, SQLSTATE 22012)
/// unless this transaction holds both records, so its `COMMIT` rolls both claims back.
pub const BOTH_HELD_SQL: &str = "
SELECT 1 / (count(*) = 2)::int
  FROM keyflight_records
 WHERE scope IN ($1, $2) AND claim_id = $3";

/// `$1`, `$2` the two scopes, `$3` the claim id: fails (division by zero, SQLSTATE 22012)
/// when another claim holds either record — it was taken over after this claim's lease ran
/// out — so the `COMMIT` rolls the settle back on both, and the two recipes never keep two
/// different answers of one request.
pub const NONE_TAKEN_SQL: &str = "
SELECT 1 / (count(*) = 0)::int
  FROM keyflight_records
 WHERE scope IN ($1, $2) AND claim_id <> $3";

/// `$1` scope, `$2` claim id, `$3` ms: keeps a lease this claim holds for at least `$3` ms
/// more, never less than it had, so that no claim can take the record over while the settle
/// that follows runs on the other partition.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
pub const HOLD_FOR_SETTLE_SQL: &str = "
UPDATE keyflight_records
   SET lease_expires_at = GREATEST(lease_expires_at,
                                   clock_timestamp() + $3::bigint * interval '1 millisecond')
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'";
