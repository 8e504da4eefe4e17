-- keyflight effects, version 3 (docs/effects.md#reconciliation): keyflight's question about a
-- run whose outcome is uncertain, and the floor that makes an `absent` answer hold. Run it
-- after V2, in one transaction; it is idempotent, and takes the same turns as V1 and V2.

SELECT pg_advisory_xact_lock(hashtext('keyflight_effects'));
--
-- The service's reconcile endpoint, asked by keyflight about run `$fence` of operation
-- `$scope`, calls alone in its own transaction, and answers only once that committed:
--
--     SELECT outcome, fence, answer FROM keyflight_effect_reconcile($scope, $fence);
--
-- `committed`: a run of the operation committed (`fence` and `answer` are that run's).
-- `absent`: none did, and none whose fence is `$fence` or lower ever will (`fence` is the
-- highest fence now refused, `answer` NULL): from now on
-- keyflight_effect_begin and keyflight_effect_commit answer such a run `fenced` (its `fence`
-- the highest refused); it rolls back and answers 5xx or 409, never its own answer.

-- Checked in the catalog first, as in V2: ALTER TABLE would queue every handler behind a
-- run in flight.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute
                   WHERE attrelid = 'keyflight_effects'::regclass
                     AND attname = 'fenced_through' AND NOT attisdropped) THEN
        ALTER TABLE keyflight_effects
            -- The floor: runs whose fence is this or lower are refused. NULL: no floor. A
            -- row with a floor, no answer and no run begun is a floor row: what an `absent`
            -- answer left behind.
            ADD COLUMN fenced_through bigint;
    END IF;
END
$$;

-- keyflight's question. A floor row is a row like any other to the primary key, so V2's
-- argument carries over: of transactions for one scope, the one inserting waits on another's
-- uncommitted row (a run that began, or recorded its answer, and has not ended) until that
-- one ends. A run in flight therefore makes the question wait: if it commits its answer, the
-- question reads it (`committed`); if it rolls back, the question's floor row goes in
-- (`absent`). A committed floor row is raised, never lowered, by a conditional UPDATE that,
-- under READ COMMITTED, re-checks its condition after waiting on a run that took the row
-- over meanwhile, and loops when that run committed. So once the question's transaction
-- committed an `absent`, every run at or below its fence that ends later finds the floor
-- (keyflight_effect_row below) and cannot commit: no fence runs while an earlier fence may
-- still commit.
CREATE OR REPLACE FUNCTION keyflight_effect_reconcile(p_scope text, p_fence bigint)
RETURNS TABLE (outcome text, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    earlier keyflight_effects%ROWTYPE;
    floor bigint;
BEGIN
    IF p_scope IS NULL OR p_fence IS NULL THEN
        RAISE EXCEPTION 'keyflight_effect_reconcile: scope and fence are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- Loops when the row changed between two statements: deleted (retention), or taken over
    -- by a run that committed.
    LOOP
        INSERT INTO keyflight_effects (scope, fence, fingerprint, answer, begun_by, fenced_through)
        VALUES (p_scope, p_fence, NULL, NULL, NULL, p_fence)
        ON CONFLICT ON CONSTRAINT keyflight_effects_pkey DO NOTHING;
        IF FOUND THEN
            RETURN QUERY SELECT 'absent'::text, p_fence, NULL::jsonb;
            RETURN;
        END IF;
        SELECT * INTO earlier FROM keyflight_effects e WHERE e.scope = p_scope;
        IF FOUND THEN
            IF earlier.answer IS NOT NULL THEN
                RETURN QUERY SELECT 'committed'::text, earlier.fence, earlier.answer;
                RETURN;
            END IF;
            IF earlier.begun_by IS NOT NULL OR earlier.fenced_through IS NULL THEN
                RAISE EXCEPTION 'keyflight_effects: operation % was begun under fence % by a transaction that committed without its answer; what it did is unknown, delete its row once resolved',
                    p_scope, earlier.fence;
            END IF;
            UPDATE keyflight_effects e
            SET fenced_through = greatest(e.fenced_through, p_fence)
            WHERE e.scope = p_scope AND e.answer IS NULL AND e.begun_by IS NULL
            RETURNING e.fenced_through INTO floor;
            IF FOUND THEN
                RETURN QUERY SELECT 'absent'::text, floor, NULL::jsonb;
                RETURN;
            END IF;
        END IF;
    END LOOP;
END
$$;

-- V2's function, with the floor: a run at or below it is `fenced`; a run above it takes the
-- floor row over, with a conditional UPDATE that re-checks after waiting on another run that
-- took it first (and loops when that one committed). The floor stays on the row, under the
-- run's begun_by or answer. Every other row is handled as in V2, whose argument holds.
CREATE OR REPLACE FUNCTION keyflight_effect_row(
    p_scope text, p_fence bigint, p_fingerprint text, p_answer jsonb)
RETURNS TABLE (outcome text, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    earlier keyflight_effects%ROWTYPE;
    mine CONSTANT text := CASE WHEN p_answer IS NULL THEN 'run' ELSE 'recorded' END;
BEGIN
    -- Loops when the row changed between two statements: deleted (retention), or a floor
    -- row taken over by another run first.
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
            -- NULL on either side (a V1 row, a V1 call, a floor row) is unknown and matches.
            IF earlier.fingerprint <> p_fingerprint THEN
                RETURN QUERY SELECT 'conflict'::text, earlier.fence, NULL::jsonb;
                RETURN;
            END IF;
            IF earlier.answer IS NOT NULL THEN
                RETURN QUERY SELECT 'earlier'::text, earlier.fence, earlier.answer;
                RETURN;
            END IF;
            IF earlier.begun_by IS NULL AND earlier.fenced_through IS NOT NULL THEN
                IF p_fence <= earlier.fenced_through THEN
                    RETURN QUERY SELECT 'fenced'::text, earlier.fenced_through, NULL::jsonb;
                    RETURN;
                END IF;
                UPDATE keyflight_effects e
                SET fence = p_fence, fingerprint = p_fingerprint, answer = p_answer,
                    begun_by = CASE WHEN p_answer IS NULL THEN txid_current() END,
                    committed_at = now()
                WHERE e.scope = p_scope AND e.answer IS NULL AND e.begun_by IS NULL
                  AND e.fenced_through < p_fence;
                IF FOUND THEN
                    RETURN QUERY SELECT mine, p_fence, p_answer;
                    RETURN;
                END IF;
                CONTINUE;
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

-- V1's call cannot say `fenced` (its `recorded` false promises an earlier answer): a fenced
-- V1 call is an error, which rolls its transaction back.
CREATE OR REPLACE FUNCTION keyflight_effect_commit(p_scope text, p_fence bigint, p_answer jsonb)
RETURNS TABLE (recorded boolean, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r record;
BEGIN
    IF p_scope IS NULL OR p_fence IS NULL OR p_answer IS NULL THEN
        RAISE EXCEPTION 'keyflight_effect_commit: scope, fence and answer are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO r FROM keyflight_effect_row(p_scope, p_fence, NULL, p_answer);
    IF r.outcome = 'fenced' THEN
        RAISE EXCEPTION 'keyflight_effects: operation % was reconciled as not committed through fence %; this run (fence %) is fenced out and must not commit',
            p_scope, r.fence, p_fence;
    END IF;
    RETURN QUERY SELECT r.outcome = 'recorded', r.fence, r.answer;
END
$$;
