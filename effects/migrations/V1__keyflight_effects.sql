-- keyflight effects: the service-side ledger that makes a guarded operation's effect
-- exactly-once (docs/effects.md). Run it in the service's own database, in one transaction
-- (`psql -1 -f`, or a migration tool), before the first handler uses it; it is idempotent,
-- and instances that run it together at start take turns.

-- Catalog updates of the same objects from two sessions fail ("tuple concurrently
-- updated"); this lock, held to the end of the transaction, makes them take turns.
SELECT pg_advisory_xact_lock(hashtext('keyflight_effects'));
--
-- A handler that got `idempotency-scope` and `idempotency-fence` from keyflight does its
-- writes in one transaction and, last in that transaction, calls
--
--     SELECT recorded, fence, answer FROM keyflight_effect_commit($scope, $fence, $answer);
--
-- `recorded` true: this call recorded the answer; COMMIT (writes and record together).
-- `recorded` false: the operation's effect already committed (an earlier run, whatever its
-- fence); ROLLBACK this transaction and answer with the returned `answer` instead.

CREATE TABLE IF NOT EXISTS keyflight_effects (
    -- The scope keyflight forwarded: 64 lowercase hex characters, one per operation.
    scope        text        PRIMARY KEY CHECK (scope ~ '^[0-9a-f]{64}$'),
    -- The fence of the claim whose run committed the effect (for audit: never compared).
    fence        bigint      NOT NULL CHECK (fence > 0),
    -- What that run answered, as the service chose to write it.
    answer       jsonb       NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);

-- Records `p_answer` as the effect of operation `p_scope` run under `p_fence`, or returns
-- the one already recorded. The primary key is the whole concurrency argument: of two
-- transactions inserting the same scope, the second waits on the first's row until it
-- ends; if the first committed, the second's insert does nothing and the SELECT (a new
-- snapshot under READ COMMITTED) reads the committed answer; if the first rolled back, the
-- second's insert goes in. So at most one transaction per scope ever commits a row, and a
-- row, once committed, is never changed: neither a stale winner (a lower fence) nor a
-- re-run (a higher one) overwrites it. Under REPEATABLE READ or SERIALIZABLE the waiting
-- transaction fails with a serialization error (SQLSTATE 40001) instead; retrying it then
-- reads the committed answer.
CREATE OR REPLACE FUNCTION keyflight_effect_commit(p_scope text, p_fence bigint, p_answer jsonb)
RETURNS TABLE (recorded boolean, fence bigint, answer jsonb)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    earlier keyflight_effects%ROWTYPE;
BEGIN
    IF p_scope IS NULL OR p_fence IS NULL OR p_answer IS NULL THEN
        RAISE EXCEPTION 'keyflight_effect_commit: scope, fence and answer are required'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- Loops only when the earlier row is deleted (retention) between the two statements.
    LOOP
        INSERT INTO keyflight_effects (scope, fence, answer)
        VALUES (p_scope, p_fence, p_answer)
        ON CONFLICT ON CONSTRAINT keyflight_effects_pkey DO NOTHING;
        IF FOUND THEN
            RETURN QUERY SELECT true, p_fence, p_answer;
            RETURN;
        END IF;
        SELECT * INTO earlier FROM keyflight_effects e WHERE e.scope = p_scope;
        IF FOUND THEN
            RETURN QUERY SELECT false, earlier.fence, earlier.answer;
            RETURN;
        END IF;
    END LOOP;
END
$$;
