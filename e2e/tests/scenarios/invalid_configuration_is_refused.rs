//! F12: an invalid plugin configuration fails plugin start with one log line naming the
//! field. With a static bootstrap, Envoy 1.40 (`failure_policy: FAIL_CLOSED`) then refuses
//! to start at all ("Unable to create Wasm plugin keyflight", exit status 1): no listener
//! ever serves, so no guarded request can slip through unguarded. The native adapter
//! refuses the same configurations with the same line, checked once when Envoy creates the
//! filter config, and Envoy refuses to start the same way ("Failed to initialize dynamic
//! module"; `filter-native/README.md#what-differs-from-the-wasm-host`): run these with
//! `KEYFLIGHT_ADAPTER=native`.

use keyflight_e2e::StackOptions;
use keyflight_e2e::stack::{EnvoyStart, start_envoy_alone};
use serde_json::json;

/// Starts Envoy with the demo plugin config edited by `edit`, and asserts it refused to
/// start with a log line that names every one of `fields`.
async fn assert_refused(
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
    fields: &[&str],
) {
    let options = StackOptions::default().policy(edit);
    match start_envoy_alone(&options.plugin).await {
        EnvoyStart::Exited { status, log } => {
            assert!(!status.success(), "Envoy exited successfully; log:\n{log}");
            let line = log
                .lines()
                .find(|line| line.contains("keyflight: invalid plugin configuration"))
                .unwrap_or_else(|| panic!("no configuration error logged; log:\n{log}"));
            for field in fields {
                assert!(
                    line.contains(field),
                    "the error line names `{field}`: {line}"
                );
            }
            let refused = if StackOptions::default().runs_native_adapter() {
                "Failed to create filter config: Failed to initialize dynamic module"
            } else {
                "Unable to create Wasm plugin keyflight"
            };
            assert!(log.contains(refused), "log:\n{log}");
        }
        EnvoyStart::Ready { log } => {
            panic!("Envoy started with an invalid plugin configuration; log:\n{log}")
        }
    }
}

#[tokio::test]
async fn the_shipped_configuration_starts() {
    let options = StackOptions::default();
    match start_envoy_alone(&options.plugin).await {
        EnvoyStart::Ready { log } => {
            assert!(!log.contains("invalid plugin configuration"), "log:\n{log}")
        }
        EnvoyStart::Exited { status, log } => {
            panic!("the shipped configuration was refused ({status}); log:\n{log}")
        }
    }
}

#[tokio::test]
async fn a_lease_of_zero_is_refused_at_plugin_start() {
    assert_refused(
        |policy| {
            policy.insert("lease_ms".into(), json!(0));
        },
        &["policies[0].lease_ms"],
    )
    .await;
}

#[tokio::test]
async fn an_unknown_field_is_refused_at_plugin_start() {
    assert_refused(
        |policy| {
            policy.insert("lease_millis".into(), json!(30_000));
        },
        &["policies[0].lease_millis"],
    )
    .await;
}

/// Hole 2 of issue 19: with a 3 s lease renewed every second and a 1 s call timeout, a renew
/// hung on a frozen replica times out 2 s into the lease, too late to be sure a retry lands:
/// a follower on a healthy replica could take the live lease over. Such a configuration is
/// refused (`docs/record-outbox.md#renewal`).
#[tokio::test]
async fn a_lease_too_short_for_a_renew_to_time_out_and_retry_is_refused_at_plugin_start() {
    assert_refused(
        |policy| {
            policy.insert("lease_ms".into(), json!(3000));
            policy.insert("renew_interval_ms".into(), json!(1000));
        },
        &[
            "policies[0].lease_ms",
            "renew_interval_ms",
            "lease_store.timeout_ms",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_mismatch_status_other_than_409_or_422_is_refused_at_plugin_start() {
    assert_refused(
        |policy| {
            policy.insert("mismatch_status".into(), json!(400));
        },
        &["policies[0].mismatch_status", "neither 409 nor 422"],
    )
    .await;
}

#[tokio::test]
async fn an_unknown_server_errors_value_is_refused_at_plugin_start() {
    assert_refused(
        |policy| {
            policy.insert("server_errors".into(), json!("release"));
        },
        &["policies[0].server_errors"],
    )
    .await;
}
