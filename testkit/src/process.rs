//! Child processes for tests: free ports, readiness waits, kill on drop.
