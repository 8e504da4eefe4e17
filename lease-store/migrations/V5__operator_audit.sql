-- V5: an append-only audit of operators' erases and resolves
-- (docs/records.md#operators).
--
-- The erase and resolve statements insert their row here in the same
-- statement, so an erase or resolve without its audit row cannot commit. The
-- table keeps who (the operator's name from the admin token set), why (the
-- reason the call must carry), what (the scope digest and the action), when,
-- and for a resolve that records a response, that response's SHA-256.
--
-- Append-only: a trigger refuses every UPDATE, DELETE and TRUNCATE, whoever
-- runs them, so a role that can write the table (the runtime role needs
-- INSERT) still cannot rewrite history; only the table's owner could drop the
-- trigger. deploy/README.md's role split also grants the runtime role only
-- SELECT and INSERT here. Retention cleanup never touches it.
--
-- Rolling deploys: a replica of the previous release erases and resolves
-- without writing a row (roll the store quickly; its erases stay logged).

SET LOCAL lock_timeout = '3s';

CREATE TABLE IF NOT EXISTS keyflight_operator_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor text NOT NULL CHECK (length(actor) BETWEEN 1 AND 128),
    action text NOT NULL CHECK (action IN ('erase', 'resolve_completed', 'resolve_failed')),
    scope bytea NOT NULL CHECK (octet_length(scope) = 32),
    reason text NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    response_sha256 bytea CHECK (octet_length(response_sha256) = 32)
);

CREATE OR REPLACE FUNCTION keyflight_operator_audit_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'keyflight_operator_audit is append-only'
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

DROP TRIGGER IF EXISTS keyflight_operator_audit_no_change ON keyflight_operator_audit;
CREATE TRIGGER keyflight_operator_audit_no_change
    BEFORE UPDATE OR DELETE ON keyflight_operator_audit
    FOR EACH ROW EXECUTE FUNCTION keyflight_operator_audit_is_append_only();

DROP TRIGGER IF EXISTS keyflight_operator_audit_no_truncate ON keyflight_operator_audit;
CREATE TRIGGER keyflight_operator_audit_no_truncate
    BEFORE TRUNCATE ON keyflight_operator_audit
    FOR EACH STATEMENT EXECUTE FUNCTION keyflight_operator_audit_is_append_only();
