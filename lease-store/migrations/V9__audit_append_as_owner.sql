-- V9: operators' erases and resolves append their audit row through a function that runs
-- with its owner's rights, so the runtime role needs no INSERT on the audit
-- (docs/threat-model.md#the-security-review).
--
-- With INSERT the runtime role could write any row: name an operator who did nothing, or
-- set `at` to before an incident, so the audit said what its writer wanted. Its UPDATE,
-- DELETE and TRUNCATE were already refused (no grant, and V5's triggers). Now the erase and
-- resolve statements call keyflight_operator_audit_append(), SECURITY DEFINER like V6's
-- epoch bump: the row's `id` and `at` are the database's, and `migrate --grant-runtime`
-- grants EXECUTE on the function and only SELECT on the table. The function still takes
-- the actor and reason the store passes: what the runtime role can no longer do is
-- backdate a row or write one outside the function's shape.
--
-- The function's search_path is pinned to the audit table's schema, then pg_temp, so no
-- object the caller creates can stand in for the table; EXECUTE is revoked from PUBLIC.
--
-- Rolling deploys: replicas of the previous release insert into the table themselves.
-- Until the migration Job's `--grant-runtime` runs they keep working; after it, their erase
-- and resolve fail whole (the row and the change are one statement), so no change goes
-- unaudited: finish the roll, then repeat the operator's call. Claims are untouched.

SET LOCAL lock_timeout = '3s';

CREATE OR REPLACE FUNCTION keyflight_operator_audit_append(
    actor text, action text, scope bytea, reason text, response_sha256 bytea
) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO keyflight_operator_audit (actor, action, scope, reason, response_sha256)
    VALUES ($1, $2, $3, $4, $5)
    RETURNING id
$$;

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION keyflight_operator_audit_append(text, text, bytea, text, bytea) '
        'SECURITY DEFINER SET search_path = %I, pg_temp',
        (SELECT n.nspname
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = 'keyflight_operator_audit'::regclass));
END
$$;

REVOKE ALL ON FUNCTION keyflight_operator_audit_append(text, text, bytea, text, bytea) FROM PUBLIC;
