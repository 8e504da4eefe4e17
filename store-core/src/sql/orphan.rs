//! Releasing a claim whose caller never got its answer (`docs/records.md#orphan-claims`,
//! `store/orphan.rs`; what each leaves: [`crate::orphan::OrphanRelease`]).

/// The `forget` release's statement, returning the fence it released.
/// `$1` scope, `$2` claim id.
/// `(state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
pub const RELEASE_ORPHAN_SQL: &str = "
DELETE FROM keyflight_records
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'
RETURNING fence";

/// Gives back a record an orphan took over: `failed`, its cooldown over at once, as a
/// `release_cooldown` of zero leaves it. The fingerprint stays, so another body is still a
/// conflict and the same request takes it over at once (the claim's `steal` branch); leaving
/// `pending` wakes its long-poll followers (the settle trigger). `$1` scope, `$2` claim id.
pub const GIVE_BACK_SQL: &str = "
UPDATE keyflight_records
   SET state = 'failed', lease_expires_at = clock_timestamp(), updated_at = clock_timestamp()
 WHERE scope = $1 AND claim_id = $2 AND (state || '') = 'pending'
RETURNING fence";
