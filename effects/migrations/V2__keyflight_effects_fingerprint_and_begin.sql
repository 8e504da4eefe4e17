-- keyflight effects, version 2 (docs/effects.md): the request's fingerprint on the row, so
-- another request under the same scope is a conflict rather than the first one's answer, and
-- an early check, so a re-run learns of the committed answer before it calls anyone. Run it
-- after V1, in one transaction; it is idempotent, and takes the same turns as V1.

SELECT pg_advisory_xact_lock(hashtext('keyflight_effects'));
--
-- A handler that got `idempotency-scope` and `idempotency-fence` from keyflight, and derived
-- its request's fingerprint, calls first in its transaction
--
--     SELECT outcome, fence, answer FROM keyflight_effect_begin($scope, $fence, $fingerprint);
--
-- `run`: no run of the operation has committed; this transaction now holds the operation's
-- row until it ends, so any other run of it waits here. Do the work, then, last,
--
--     SELECT outcome, fence, answer FROM keyflight_effect_commit($scope, $fence, $fingerprint, $answer);
--
-- `recorded`: COMMIT (writes and record together). `earlier` (from either call): an earlier
-- run committed; ROLLBACK and answer with the returned `answer`. `conflict` (from either):
-- a request with another fingerprint committed under this scope; ROLLBACK and answer 409.
-- A transaction that called keyflight_effect_begin ends with keyflight_effect_commit and
-- COMMIT, or with ROLLBACK: never with a COMMIT alone.

-- Checked in the catalog first: ALTER TABLE takes the table's strongest lock even when
-- there is nothing to do, and would queue every handler behind a run in flight.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute
                   WHERE attrelid = 'keyflight_effects'::regclass
                     AND attname = 'fingerprint' AND NOT attisdropped) THEN
        ALTER TABLE keyflight_effects
            -- What the service derived from the request (its body, its parameters): NULL
            -- on rows V1 wrote, which match any fingerprint.
            ADD COLUMN fingerprint text,
            -- While a run is in flight: the transaction that began it (the row's answer is
            -- then NULL, and nobody else sees the row until that transaction commits).
            ADD COLUMN begun_by bigint,
            ALTER COLUMN answer DROP NOT NULL;
    END IF;
END
$$;

-- Both calls below, in one place: `p_answer` NULL begins a run, else records its answer.
-- The primary key is the whole concurrency argument, as in V1: of two transactions
-- inserting the same scope, the second waits on the first's row until the first ends; if
-- the first committed, the second's insert does nothing and the SELECT (a new snapshot under
-- READ COMMITTED) reads the committed row; if the first rolled back, the second's insert
-- goes in. So at most one transaction per scope holds the row, the early check included:
-- a run that began holds it through its calls outside the database, and a run arriving
-- meanwhile, whatever its fence, waits, then answers the first's answer or, if the first
-- rolled back, runs. A committed answer is never changed. A row whose answer is NULL is
-- visible only to the transaction that began it, unless that transaction committed without
-- recording an answer: then nobody can know what it did, and the row is refused until an
-- operator deletes it.
CREATE OR REPLACE FUNCTION keyflight_effect_row(
    p_scope text, p_fence bigint, p_fingerprint text, p_answer jsonb)
RETURNS TABLE (outcome text, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    earlier keyflight_effects%ROWTYPE;
    mine CONSTANT text := CASE WHEN p_answer IS NULL THEN 'run' ELSE 'recorded' END;
BEGIN
    -- Loops only when the earlier row is deleted (retention) between the two statements.
    LOOP
        INSERT INTO keyflight_effects (scope, fence, fingerprint, answer, begun_by)
        VALUES (p_scope, p_fence, p_fingerprint, p_answer,
                CASE WHEN p_answer IS NULL THEN txid_current() END)
        ON CONFLICT ON CONSTRAINT keyflight_effects_pkey DO NOTHING;
        IF FOUND THEN
            RETURN QUERY SELECT mine, p_fence, p_answer;
            RETURN;
        END IF;
        SELECT * INTO earlier FROM keyflight_effects e WHERE e.scope = p_scope;
        IF FOUND THEN
            -- NULL on either side (a V1 row, a V1 call) is unknown and matches.
            IF earlier.fingerprint <> p_fingerprint THEN
                RETURN QUERY SELECT 'conflict'::text, earlier.fence, NULL::jsonb;
                RETURN;
            END IF;
            IF earlier.answer IS NOT NULL THEN
                RETURN QUERY SELECT 'earlier'::text, earlier.fence, earlier.answer;
                RETURN;
            END IF;
            -- txid_current() is the top-level transaction's, savepoints included.
            IF earlier.begun_by IS DISTINCT FROM txid_current() THEN
                RAISE EXCEPTION 'keyflight_effects: operation % was begun under fence % by a transaction that committed without its answer; what it did is unknown, delete its row once resolved',
                    p_scope, earlier.fence;
            END IF;
            -- This transaction began the run: record its answer, or begin it again.
            IF p_answer IS NOT NULL THEN
                UPDATE keyflight_effects e
                SET fence = p_fence, fingerprint = coalesce(p_fingerprint, e.fingerprint),
                    answer = p_answer, begun_by = NULL, committed_at = now()
                WHERE e.scope = p_scope;
            END IF;
            RETURN QUERY SELECT mine, p_fence, p_answer;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- The early check: first in the handler's transaction.
CREATE OR REPLACE FUNCTION keyflight_effect_begin(p_scope text, p_fence bigint, p_fingerprint text)
RETURNS TABLE (outcome text, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_scope IS NULL OR p_fence IS NULL OR p_fingerprint IS NULL THEN
        RAISE EXCEPTION 'keyflight_effect_begin: scope, fence and fingerprint are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN QUERY SELECT * FROM keyflight_effect_row(p_scope, p_fence, p_fingerprint, NULL);
END
$$;

-- The record: last in the handler's transaction, with or without keyflight_effect_begin.
CREATE OR REPLACE FUNCTION keyflight_effect_commit(
    p_scope text, p_fence bigint, p_fingerprint text, p_answer jsonb)
RETURNS TABLE (outcome text, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_scope IS NULL OR p_fence IS NULL OR p_fingerprint IS NULL OR p_answer IS NULL THEN
        RAISE EXCEPTION 'keyflight_effect_commit: scope, fence, fingerprint and answer are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN QUERY SELECT * FROM keyflight_effect_row(p_scope, p_fence, p_fingerprint, p_answer);
END
$$;

-- V1's call, for a service not yet passing a fingerprint: it records none (unknown).
CREATE OR REPLACE FUNCTION keyflight_effect_commit(p_scope text, p_fence bigint, p_answer jsonb)
RETURNS TABLE (recorded boolean, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_scope IS NULL OR p_fence IS NULL OR p_answer IS NULL THEN
        RAISE EXCEPTION 'keyflight_effect_commit: scope, fence and answer are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN QUERY SELECT r.outcome = 'recorded', r.fence, r.answer
                 FROM keyflight_effect_row(p_scope, p_fence, NULL, p_answer) r;
END
$$;
