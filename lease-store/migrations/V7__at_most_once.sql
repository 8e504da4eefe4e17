-- V7: remember whether a record's claim is at-most-once, so its lapsed lease is held.
--
-- A claim made under a policy with `uncertain: hold` carries `at_most_once`
-- (docs/records.md#a-lapsed-at-most-once-lease). The claim statement stores it
-- in the row, and when that row's lease lapses (its winner died) the next claim
-- makes it `unknown` for an operator instead of taking it over and running the
-- operation a second time.
--
-- ADD COLUMN with a constant default does not rewrite the table (PG 11+), and
-- the default `false` is today's behaviour: a lapsed lease is taken over.
--
-- Rolling deploys (expand only): replicas of the previous release neither
-- write nor read the column. Their inserts take the default, and their
-- takeovers keep the flag of the claim they take over; either way a lapse is
-- taken over by an old replica as before, and held by a new one only when the
-- row says so. Filters send `at_most_once` only for hold policies, and a store
-- of the previous release refuses that claim (unknown field), so roll the
-- store first.

SET LOCAL lock_timeout = '3s';

ALTER TABLE keyflight_records
    ADD COLUMN IF NOT EXISTS at_most_once boolean NOT NULL DEFAULT false;
