//! The lease-store over HTTP, as the filter and operators reach it: `lease-store serve` as a
//! child process on a real throwaway Postgres. One binary, one module per topic; `support`
//! starts servers and sends requests.

#![allow(clippy::unwrap_used)]

mod answer_budget;
mod auth;
mod batches;
mod claim_age;
mod claims;
mod cli;
mod console;
mod console_login;
mod contract_ranges;
mod database_down;
mod database_errors;
mod epoch;
mod evidence_lines;
mod input;
mod least_privilege;
mod lifecycle;
mod logs_hold_no_secrets;
mod longpoll_caps;
mod mesh_identity;
mod namespace_transition;
mod openapi_conformance;
mod outage_logs;
mod proxies_close_idle_connections_first;
mod record_bounds;
mod recorded_headers;
mod records;
mod slow_clients;
mod storage_quota;
mod support;
mod tls;
mod token_rotation;
