-- V11: each record names the workload that made it, so a workload's share of the
-- database can be measured and capped (docs/records.md#storage-quota).
--
-- A record's scope is the framed hash of the caller's SPIFFE id and the scope it sent
-- (protocol::scope::record_scope), so the workload cannot be read back from it; the claim
-- that inserts the row writes it here. NULL: a bearer-token caller's record, or one a
-- previous release inserted (measured together as the `bearer` share).
--
-- Rolling deploys (expand only): a nullable column without a default is a catalog change,
-- no table rewrite; the previous release's INSERTs leave it NULL.

SET LOCAL lock_timeout = '3s';

ALTER TABLE keyflight_records ADD COLUMN IF NOT EXISTS workload text;
