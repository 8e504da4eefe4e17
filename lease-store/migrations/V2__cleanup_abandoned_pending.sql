-- V2: index the cleanup predicate that also reaps abandoned `pending` rows.
--
-- Cleanup (store/retention.rs) now deletes, past retention, `completed` and
-- `failed` rows AND `pending` rows whose lease has run out (a crashed winner
-- whose key is never retried). V1's partial index covers only the terminal
-- states, so it is replaced by one whose predicate covers all three.
--
-- Rolling deploys (expand/contract): V1's cleanup query
-- (state IN ('completed', 'failed')) implies this index's predicate, so
-- replicas still running the previous release keep an index for their
-- cleanup once the old one is dropped.
--
-- Large tables: refinery runs this file in a transaction, so the index cannot
-- be built CONCURRENTLY here, and a plain CREATE INDEX blocks writes for the
-- whole build. On a big live table build it out of band first (see
-- README.md), with exactly this name and definition:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS keyflight_records_retention_idx
--       ON keyflight_records (expires_at)
--       WHERE state IN ('completed', 'failed', 'pending');
--   DROP INDEX CONCURRENTLY IF EXISTS keyflight_records_cleanup_idx;
-- and this migration then finds nothing left to do.

SET LOCAL lock_timeout = '3s';

CREATE INDEX IF NOT EXISTS keyflight_records_retention_idx
    ON keyflight_records (expires_at)
    WHERE state IN ('completed', 'failed', 'pending');

DROP INDEX IF EXISTS keyflight_records_cleanup_idx;
