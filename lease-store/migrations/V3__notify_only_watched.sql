-- V3: announce a settle only when a long-poll follower is watching the record.
--
-- NOTIFY takes a database-wide lock at commit and holds it through the WAL
-- flush, so with V1's unconditional trigger every finalize in the database
-- committed one at a time: no group commit for finalizes, however many
-- clients. Measured on the benchmark machine with the store's own claim +
-- finalize SQL under pgbench at 16 clients: ~2,200 pairs/s with the
-- unconditional NOTIFY, ~3,800/s without it. Most requests have no follower,
-- so most finalizes need no NOTIFY at all.
--
-- A follower now marks the record `watched` (store/watch.rs) after it has
-- subscribed in its own process and BEFORE it reads the record, and the
-- triggers fire only for a watched record. Either the mark commits first and
-- the settle that follows sees `watched` and notifies, or the settle commits
-- first and the mark finds no `pending` row, so the follower's read (which
-- comes after the mark) sees the settled record. No settle can slip between.
--
-- The flag is never cleared: a record that was watched once may notify again
-- on a later settle (after a steal or a TTL reuse), which costs one spare
-- NOTIFY and nothing else.
--
-- Rolling deploys: followers on replicas still running the previous release
-- do not mark records, so a settle only they wait on is not announced; they
-- fall back to their wait deadline (the filter answers 503 with Retry-After
-- and the retry replays). Nothing runs twice and nothing is lost; roll
-- quickly (see README.md).
--
-- ADD COLUMN with a constant default does not rewrite the table (PG 11+).

SET LOCAL lock_timeout = '3s';

ALTER TABLE keyflight_records
    ADD COLUMN IF NOT EXISTS watched boolean NOT NULL DEFAULT false;

DROP TRIGGER IF EXISTS keyflight_records_settled_update ON keyflight_records;
CREATE TRIGGER keyflight_records_settled_update
    AFTER UPDATE ON keyflight_records
    FOR EACH ROW
    WHEN (OLD.state = 'pending' AND NEW.state <> 'pending' AND OLD.watched)
    EXECUTE FUNCTION keyflight_notify_settled();

DROP TRIGGER IF EXISTS keyflight_records_settled_delete ON keyflight_records;
CREATE TRIGGER keyflight_records_settled_delete
    AFTER DELETE ON keyflight_records
    FOR EACH ROW
    WHEN (OLD.state = 'pending' AND OLD.watched)
    EXECUTE FUNCTION keyflight_notify_settled();
