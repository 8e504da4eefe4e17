//! The claim: one statement of four CTEs (`ins`, `ttl`, `steal`, `held`), raced on Postgres
//! (`docs/records.md#the-claim-statement`), and the read that explains a lost claim. The
//! lease-store's `store/claim.rs` runs them.

/// What the `ttl` and `steal` branches of [`CLAIM_SQL`] make of the row they
/// take: a fresh `pending` lease for this claim, with a new fence, retention
/// and expiry, and no recorded response. One list, so a column added to the
/// record is reset the same way whichever branch reopens it. (`fingerprint =
/// $2` changes nothing for `steal`, which takes only a row of that fingerprint.)
macro_rules! reopened_row {
    () => {
        "
       SET state = 'pending', fingerprint = $2, claim_id = $3,
           fence = nextval('keyflight_fence_seq'),
           lease_expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
           created_at = clock_timestamp(),
           retention = $5::bigint * interval '1 millisecond',
           expires_at = clock_timestamp() + $5::bigint * interval '1 millisecond',
           response_status = NULL, response_headers = NULL, response_body = NULL,
           replayable = true, at_most_once = $7, updated_at = clock_timestamp()"
    };
}

/// What the `held` branch of [`CLAIM_SQL`] and [`HOLD_LAPSED_SQL`] make of a
/// lapsed lease that is at-most-once — claimed so, or retried so by a claim of the
/// same fingerprint (`$1` the scope; the arguments: whether a lapsed lease may be held
/// now, as it may be taken over: not during the takeover grace; the claim's
/// fingerprint; whether the claim is at-most-once): `unknown`, for an operator
/// (`docs/records.md#a-lapsed-at-most-once-lease`). The winner may have run the
/// operation before it died; nobody knows, so nobody runs it again. A renew or
/// settle that lands first keeps the row out of reach (the predicate is re-checked
/// on the locked row, as for `steal`). Past retention the `ttl` branch reuses the
/// row instead, as it reuses every settled record.
/// `(r.state || '')` keeps the lookup on the primary key (`docs/records.md#the-indexes`).
macro_rules! held_lapse {
    ($may_hold:literal, $fingerprint:literal, $at_most_once:literal) => {
        concat!(
            "
    UPDATE keyflight_records r
       SET state = 'unknown', lease_expires_at = NULL, updated_at = clock_timestamp()
     WHERE r.scope = $1
       AND (r.state || '') = 'pending'
       AND (r.at_most_once OR (",
            $at_most_once,
            " AND r.fingerprint = ",
            $fingerprint,
            "))
       AND ",
            $may_hold,
            "
       AND r.lease_expires_at < clock_timestamp()
       AND r.expires_at >= clock_timestamp()"
        )
    };
}

/// The `held` branch alone: `$1` scope, `$2` the claim's fingerprint, `$3` whether a
/// lapsed lease may be held now, `$4` whether the claim is at-most-once. A dual claim's
/// transaction rolls back when it did not win both records, and a lapse it held with
/// them, so it holds the lapse again on its own (`dual/`).
pub const HOLD_LAPSED_SQL: &str = concat!(
    held_lapse!("$3", "$2", "$4"),
    "
 RETURNING r.fence"
);

/// `$1` scope, `$2` fingerprint, `$3` claim id, `$4` lease ms, `$5` retention ms,
/// `$6` whether an expired `pending` lease may be taken over (false during the
/// replica's takeover grace, see `keyflight_store_core::grace`; `failed` cooldowns elapse regardless),
/// `$7` whether this claim is at-most-once (its policy holds uncertain outcomes: a
/// lapsed lease of its own fingerprint is held, never taken over), `$8` the workload the
/// record is counted to (`NULL`: a bearer-token caller; `docs/records.md#storage-quota`).
pub const CLAIM_SQL: &str = concat!(
    "
WITH ins AS (
    INSERT INTO keyflight_records
        (scope, state, fingerprint, claim_id, fence, lease_expires_at,
         created_at, retention, expires_at, at_most_once, updated_at, workload)
    VALUES ($1, 'pending', $2, $3, nextval('keyflight_fence_seq'),
            clock_timestamp() + $4::bigint * interval '1 millisecond',
            clock_timestamp(), $5::bigint * interval '1 millisecond',
            clock_timestamp() + $5::bigint * interval '1 millisecond',
            $7, clock_timestamp(), $8::text)
    ON CONFLICT (scope) DO NOTHING
    RETURNING 'claimed'::text AS how, fence
),
ttl AS (
    UPDATE keyflight_records r",
    reopened_row!(),
    "
     WHERE r.scope = $1
       AND NOT EXISTS (SELECT 1 FROM ins)
       AND r.expires_at < clock_timestamp()
       AND (r.state IN ('completed', 'failed')
            OR (r.state = 'pending' AND r.lease_expires_at < clock_timestamp() AND $6))
    RETURNING 'recovered_ttl'::text AS how, r.fence
),
steal AS (
    UPDATE keyflight_records r",
    reopened_row!(),
    "
     WHERE r.scope = $1
       AND NOT EXISTS (SELECT 1 FROM ins)
       AND NOT EXISTS (SELECT 1 FROM ttl)
       AND r.expires_at >= clock_timestamp()
       AND (r.state = 'failed'
            OR (r.state = 'pending' AND $6 AND NOT r.at_most_once AND NOT $7))
       AND r.lease_expires_at < clock_timestamp()
       AND r.fingerprint = $2
    RETURNING 'recovered_abandoned'::text AS how, r.fence
),
held AS (",
    held_lapse!("$6", "$2", "$7"),
    "
       AND NOT EXISTS (SELECT 1 FROM ins)
       AND NOT EXISTS (SELECT 1 FROM ttl)
    RETURNING 'held'::text AS how, r.fence
)
SELECT how, fence FROM ins
UNION ALL SELECT how, fence FROM ttl
UNION ALL SELECT how, fence FROM steal
UNION ALL SELECT how, fence FROM held"
);

/// Reads what a lost claim lost to. `remaining_ms` is the time left on the
/// lease (pending) or cooldown (failed), by the database's clock;
/// `retention_over` says whether [`CLAIM_SQL`]'s `ttl` branch may reuse the row;
/// `expires_in_ms` is the retention left (F9: an edge caches a replay no longer).
pub const READ_SQL: &str = "
SELECT state, fingerprint, fence, replayable, response_status, response_headers, response_body,
       GREATEST(0, ceil(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000))::bigint
           AS remaining_ms,
       expires_at < clock_timestamp() AS retention_over,
       GREATEST(0, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint
           AS expires_in_ms
  FROM keyflight_records
 WHERE scope = $1";
