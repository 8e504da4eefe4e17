-- V1: the records table, its fence sequence and the settle notification.
--
-- Conventions for every migration in this directory (see README.md):
--   * forward-only; a release's code must run against the schema of the
--     previous release AND of the next one (expand/contract);
--   * each file runs in its own transaction (refinery) and starts with
--     SET LOCAL lock_timeout, so a migration that cannot get its lock fails
--     fast instead of queueing every claim behind it;
--   * constraints added to an existing table go in as NOT VALID and are
--     validated in a later statement/migration (no long ACCESS EXCLUSIVE scan).
--
-- Portability (L9): no advisory locks, no SKIP LOCKED, no partial-index
-- tricks the claim depends on. The claim works on any engine with
-- INSERT ... ON CONFLICT and data-modifying CTEs; the NOTIFY trigger below is
-- the only Postgres-specific piece, and without it long-poll waiters simply
-- fall back to their deadlines.

SET LOCAL lock_timeout = '3s';

-- Fences: strictly increasing across every claim of every scope (L2).
CREATE SEQUENCE keyflight_fence_seq AS bigint;

CREATE TABLE keyflight_records (
    -- SHA-256 of the canonical scope tuple (K3): the raw key is never stored.
    scope            bytea       NOT NULL PRIMARY KEY,
    state            text        NOT NULL,
    -- SHA-256 request fingerprint (K4) of the claim that owns the record.
    fingerprint      bytea       NOT NULL,
    -- The last claim that owned the record (UUIDv7, minted by the lease-store).
    claim_id         uuid,
    -- Fence of the last claim (from keyflight_fence_seq).
    fence            bigint      NOT NULL,
    -- pending: lease end; failed: cooldown end; otherwise NULL.
    lease_expires_at timestamptz,
    -- When the current claim was made; retention counts from here.
    created_at       timestamptz NOT NULL,
    -- Retention asked for by the claim (per policy, L5).
    retention        interval    NOT NULL,
    -- created_at + retention: when cleanup may delete a terminal row.
    expires_at       timestamptz NOT NULL,
    response_status  integer,
    -- Allowlisted response headers: a JSON array of [name, value] pairs.
    response_headers jsonb,
    response_body    bytea,
    -- false: completed, but the response was too large to keep (F6).
    replayable       boolean     NOT NULL DEFAULT true,
    updated_at       timestamptz NOT NULL,

    CONSTRAINT keyflight_records_scope_is_sha256
        CHECK (octet_length(scope) = 32),
    CONSTRAINT keyflight_records_fingerprint_is_sha256
        CHECK (octet_length(fingerprint) = 32),
    CONSTRAINT keyflight_records_state_known
        CHECK (state IN ('pending', 'completed', 'failed', 'unknown')),
    CONSTRAINT keyflight_records_pending_has_lease
        CHECK (state <> 'pending' OR (claim_id IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT keyflight_records_replayable_has_response
        CHECK (state <> 'completed' OR NOT replayable
               OR (response_status IS NOT NULL AND response_body IS NOT NULL)),
    CONSTRAINT keyflight_records_failed_has_cooldown
        CHECK (state <> 'failed' OR lease_expires_at IS NOT NULL),
    CONSTRAINT keyflight_records_status_range
        CHECK (response_status IS NULL OR response_status BETWEEN 100 AND 599),
    CONSTRAINT keyflight_records_headers_are_array
        CHECK (response_headers IS NULL OR jsonb_typeof(response_headers) = 'array')
);

-- Cleanup scans terminal rows past retention (L5).
CREATE INDEX keyflight_records_cleanup_idx
    ON keyflight_records (expires_at)
    WHERE state IN ('completed', 'failed');

-- The operator API lists records by state, newest first (L6).
CREATE INDEX keyflight_records_state_idx
    ON keyflight_records (state, created_at DESC);

-- Long-poll (L4): every time a record leaves `pending` (finalize, release,
-- forget, erase) the scope's hex digest is announced on `keyflight_settled`.
-- NOTIFY is database-wide, so waiters on every lease-store replica hear it;
-- it is delivered at commit, so a woken waiter always sees the new state.
CREATE FUNCTION keyflight_notify_settled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('keyflight_settled', encode(OLD.scope, 'hex'));
    RETURN NULL;
END;
$$;

CREATE TRIGGER keyflight_records_settled_update
    AFTER UPDATE ON keyflight_records
    FOR EACH ROW
    WHEN (OLD.state = 'pending' AND NEW.state <> 'pending')
    EXECUTE FUNCTION keyflight_notify_settled();

CREATE TRIGGER keyflight_records_settled_delete
    AFTER DELETE ON keyflight_records
    FOR EACH ROW
    WHEN (OLD.state = 'pending')
    EXECUTE FUNCTION keyflight_notify_settled();
