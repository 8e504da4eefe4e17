-- V10: the audit names the reconciler's decisions as well as the operators'
-- (docs/reconcile.md#what-the-store-records).
--
-- Under `uncertain: reconcile` a filter settles an `unknown` record with what the
-- service's own ledger said: `reconciled_committed` (the record becomes completed with the
-- service's answer) or `reconciled_absent` (the run was fenced out; the record becomes
-- failed with its cooldown over). Each writes its audit row in the same statement as the
-- change, through keyflight_operator_audit_append() (V9), as an operator's resolve does;
-- the actor names the workload that reported it.
--
-- Rolling deploys (expand only): the previous release writes only the three old actions,
-- which the wider CHECK still admits. The constraint is added NOT VALID and then validated
-- (rule 4 of README.md), although the audit holds one row per decision only.

SET LOCAL lock_timeout = '3s';

ALTER TABLE keyflight_operator_audit
    DROP CONSTRAINT IF EXISTS keyflight_operator_audit_action_check,
    ADD CONSTRAINT keyflight_operator_audit_action_check CHECK (action IN (
        'erase', 'resolve_completed', 'resolve_failed',
        'reconciled_committed', 'reconciled_absent')) NOT VALID;

ALTER TABLE keyflight_operator_audit VALIDATE CONSTRAINT keyflight_operator_audit_action_check;
