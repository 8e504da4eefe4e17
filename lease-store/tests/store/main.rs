//! The lease-store against a real throwaway Postgres, store level: claims, fencing, the
//! long-poll, group commit, cleanup and the outages it must survive. One binary, one module
//! per topic; `support` starts the shared cluster and builds requests.

#![allow(clippy::unwrap_used)]

mod at_most_once;
mod batch_claims;
mod batch_finalizes;
mod claim;
mod cleanup;
mod dead_first_host;
mod dual_claims;
mod epoch;
mod frozen;
mod least_privilege;
mod longpoll;
mod orphans;
mod partitioned;
mod partitioned_links;
mod pool;
mod read_only_node;
mod reconciled;
mod recorded_bodies;
mod records;
mod repeats;
mod support;
mod takeover_grace;
mod unavailable;
