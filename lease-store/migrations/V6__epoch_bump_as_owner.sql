-- V6: the operator epoch is bumped with its owner's rights, so the runtime role needs no
-- UPDATE on it (least privilege, deploy/README.md "Roles and privileges").
--
-- V4's trigger function runs as whoever fires the trigger: an erase, a resolve or a
-- reclaim by the runtime role, which therefore needed UPDATE on keyflight_operator_epoch
-- and could also set the epoch to any value, back to one an edge cached under (an edge
-- would then serve an erased record again). SECURITY DEFINER makes the function run as its
-- owner (the role that ran V4, the schema owner), so `lease-store migrate --grant-runtime`
-- grants the runtime role only SELECT on the epoch, and the one way it can move is up by
-- one, from the triggers, in the transaction of the change that needs it.
--
-- A SECURITY DEFINER function must not resolve names through a search_path its caller
-- controls: it is pinned to the schema that holds the epoch table (found here, since
-- installs choose their schema), then pg_temp last, so no object the caller creates can
-- stand in for the table. Nobody calls it directly (a trigger function cannot be), and
-- EXECUTE is revoked from PUBLIC besides; firing a trigger checks no EXECUTE right.
--
-- Rolling deploys: the triggers and their WHEN clauses are unchanged, so replicas of the
-- previous release erase and resolve exactly as before. Granting comes after this file
-- (`migrate --grant-runtime`), so the runtime role keeps UPDATE until the function no
-- longer needs it.

SET LOCAL lock_timeout = '3s';

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION keyflight_bump_operator_epoch() SECURITY DEFINER SET search_path = %I, pg_temp',
        (SELECT n.nspname
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = 'keyflight_operator_epoch'::regclass));
END
$$;

REVOKE ALL ON FUNCTION keyflight_bump_operator_epoch() FROM PUBLIC;
