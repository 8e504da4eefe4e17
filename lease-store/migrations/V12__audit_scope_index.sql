-- V12: the operator audit is indexed on (scope, id), because the console reads it by scope,
-- newest first (docs/records.md#the-indexes).
--
-- Without it the newest 100 rows about one record are found by walking every decision ever
-- audited backwards by id: the audit grows with every erase, resolve and reconciled record
-- and is never cleaned up. With it they are read from the index, in order.
--
-- A plain CREATE INDEX holds the audit's writes (erase, resolve, reconcile; never a claim)
-- for the build. On a large audit, build it out of band first and let this find it (rule 4
-- of README.md):
--
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS keyflight_operator_audit_scope_idx
--       ON keyflight_operator_audit (scope, id);
--
-- Rolling deploys (expand only): the previous release's statements are unchanged, and its
-- reads of the audit use the index as well. A partitioned database gets it on every
-- partition, which `migrate` migrates like any database; the router holds no audit.

SET LOCAL lock_timeout = '3s';

CREATE INDEX IF NOT EXISTS keyflight_operator_audit_scope_idx
    ON keyflight_operator_audit (scope, id);
