-- V4: the operator epoch, so an edge cache never serves an erased or
-- re-resolved record for longer than the filter's edge_cache.max_staleness_ms.
--
-- Edges cache completed records (filter F9) and ask `GET /v1/epoch` every
-- third of that bound; an entry is served only under the epoch it was written
-- under. So every change that makes a record an edge may hold wrong must bump
-- the epoch, in the transaction that makes the change:
--
-- * a settled record deleted while still live — an operator's erase (retention
--   cleanup deletes only rows past their expiry; a `forget` release deletes
--   only `pending` rows, which no edge caches);
-- * an `unknown` record resolved, or a `completed` record reclaimed past its
--   retention (the only updates that change a settled record).
--
-- A trigger rather than a line in each statement, so every path that does
-- this bumps the epoch, including replicas of the previous release during a
-- rolling deploy (their erase and resolve statements are unchanged). Both
-- WHEN clauses are evaluated per row without calling the function, so
-- finalizes, renews and cleanup batches pay nothing measurable.
--
-- The row lock on the one epoch row serializes concurrent erases; they are
-- operator actions, rare by nature. Rolling deploys: a filter whose store
-- has no /v1/epoch yet gets a 404, treats the cache as stale and claims
-- every request (correct, only slower), so roll the store first.

SET LOCAL lock_timeout = '3s';

CREATE TABLE IF NOT EXISTS keyflight_operator_epoch (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0)
);
INSERT INTO keyflight_operator_epoch DEFAULT VALUES ON CONFLICT DO NOTHING;

CREATE OR REPLACE FUNCTION keyflight_bump_operator_epoch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE keyflight_operator_epoch SET epoch = epoch + 1;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS keyflight_records_epoch_delete ON keyflight_records;
CREATE TRIGGER keyflight_records_epoch_delete
    AFTER DELETE ON keyflight_records
    FOR EACH ROW
    WHEN (OLD.state <> 'pending' AND OLD.expires_at > clock_timestamp())
    EXECUTE FUNCTION keyflight_bump_operator_epoch();

DROP TRIGGER IF EXISTS keyflight_records_epoch_update ON keyflight_records;
CREATE TRIGGER keyflight_records_epoch_update
    AFTER UPDATE ON keyflight_records
    FOR EACH ROW
    WHEN (OLD.state IN ('completed', 'unknown') AND NEW.state <> OLD.state)
    EXECUTE FUNCTION keyflight_bump_operator_epoch();
