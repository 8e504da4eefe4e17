//! The end-to-end scenarios: real Envoy loading the real `.wasm`, real lease-store, real
//! Postgres, the counting upstream. One binary, one module per behaviour; every test name
//! reads as a sentence (`module::test`).

mod ambiguous_principals_are_refused;
mod authz_and_redirects_are_not_recorded;
mod bodies_are_bounded;
mod claims_outlive_their_stream;
mod client_command;
mod completed_requests_replay;
mod concurrent_duplicates_run_once;
mod crashed_winners_are_recovered;
mod delegated_users_never_share_a_scope;
mod edge_cache_entries_die_with_their_record;
mod edge_cache_replays_without_the_store;
mod encoded_answers_decode_for_every_client;
mod erased_records_stop_replaying_at_the_edge;
mod expired_records_run_again;
mod followers_wait_or_retry_later;
mod frozen_lease_stores_are_routed_around;
mod invalid_configuration_is_refused;
mod jwt_actors_are_isolated;
mod key_reuse_conflicts;
mod keys_are_validated;
mod leases_are_renewed_while_running;
mod media_types_are_part_of_the_request;
mod mtls_peers_are_isolated;
mod oversized_answers_are_delivered_not_replayed;
mod partitioned_winners_are_taken_over;
mod principal_sources_never_share_a_scope;
mod principals_are_isolated;
mod proxy_lifecycle_keeps_the_outbox;
mod recipe_changes_run_once;
mod recorded_headers_never_smuggle;
mod repeated_query_parameters_keep_their_order;
mod respelled_targets_cannot_escape_a_policy;
mod retryable_failures_cool_down;
mod rollout_modes_never_block;
mod router_retries_never_rerun_a_guarded_request;
mod stale_winners_are_fenced;
mod store_down_never_dispatches;
mod store_token_stays_out_of_config_dump;
mod the_cli_agrees_with_the_filter;
mod two_replicas_run_once;
mod uncertain_outcomes_follow_the_policy;
mod upgrades_run_once;
mod upstream_answers_follow_the_status_matrix;
mod workloads_reach_only_their_own_records;
