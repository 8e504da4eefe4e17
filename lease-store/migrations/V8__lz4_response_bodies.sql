-- V8: compress recorded bodies with lz4 where the server has it.
--
-- A recorded body is TOASTed, and Postgres compresses it with pglz unless told
-- otherwise (default_toast_compression). lz4 compresses a large JSON body about
-- three times faster to nearly the same size, and every large finalize pays that
-- compression inside Postgres (measured: lease-store/migrations/README.md, V8).
-- Only values written from now on use it; each stored value records its own
-- method, so the pglz ones already written read as before.
--
-- A server built without lz4 refuses the setting (feature_not_supported): the
-- column then keeps pglz, and the migration still succeeds.
--
-- Catalog only, no rewrite; ALTER TABLE holds its lock for that moment, bounded
-- by the timeout below. Replicas of the previous release write the column as
-- before and cannot tell.

SET LOCAL lock_timeout = '3s';

DO $$
BEGIN
    ALTER TABLE keyflight_records ALTER COLUMN response_body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: recorded bodies stay compressed with pglz';
END
$$;
