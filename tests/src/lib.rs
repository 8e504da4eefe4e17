//! End-to-end harness (built with the edge-filter issue).
