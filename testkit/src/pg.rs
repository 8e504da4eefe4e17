//! A throwaway Postgres cluster per test run.
