//! The two-replica stack a chaos run breaks, as the one launcher starts it
//! (`keyflight_testkit::stack`): one Postgres (or, with `--ha`, a Patroni pair), two
//! lease-stores, one demo upstream, two Envoys each reaching both lease-stores.
//!
//! What a fault-injection run needs beyond the test stack is options of the launcher: its
//! parts log to one file each under the run's directory (`logs/`), continued across
//! restarts and kept after the run, and each Envoy adds `x-keyflight-via: envoy-N` to the
//! requests it forwards, so the upstream's execution log says which Envoy dispatched each
//! execution. A run with network faults also puts each Envoy and lease-store in its own
//! network namespace (the launcher's `own_networks`), so their links can be cut. This
//! module only says which options, and reads what the run needs back.

use std::net::SocketAddr;
use std::path::Path;

use keyflight_testkit::stack::{Stack, StackOptions};
use serde_json::Value;

/// The launcher's options for a chaos run under `dir` with the plugin configuration
/// `plugin` and `replicas` Envoy + lease-store replicas.
pub fn options(
    dir: &Path,
    plugin: &Value,
    replicas: usize,
    replicated_postgres: bool,
    own_networks: bool,
) -> StackOptions {
    let options = StackOptions::default()
        .plugin(|shipped| *shipped = plugin.clone())
        .replicas(replicas)
        .run_dir(dir)
        .tag_envoys()
        // Envoy 0's listener comes from an LDS file: the plugin-push fault.
        .reconfigurable()
        // JSON lines: the evidence the checker reads (`checker/evidence.rs`).
        .store_env("KEYFLIGHT_LOG_FORMAT", "json")
        // A rolling upgrade runs the previous release, which reads its token only there.
        .inline_filter_token();
    match (replicated_postgres, own_networks) {
        (true, _) => options.replicated_postgres(),
        (false, true) => options.own_networks(),
        (false, false) => options,
    }
}

/// Where the workload reaches the stack: copied out, so it never borrows the stack the
/// fault runner is changing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Each Envoy's listener.
    pub listeners: Vec<SocketAddr>,
    /// The demo upstream.
    pub upstream: SocketAddr,
}

impl Endpoints {
    /// Where `stack`'s Envoys and upstream listen.
    pub fn of(stack: &Stack) -> Endpoints {
        Endpoints {
            listeners: (0..stack.replicas())
                .map(|index| {
                    SocketAddr::new(stack.envoy_ip(index), stack.envoy_ports(index).listener)
                })
                .collect(),
            upstream: stack.upstream_address(),
        }
    }
}

/// Each lease-store's and each Envoy's log so far (every process of a part writes to one
/// log), for the evidence they hold (`checker/evidence.rs`).
pub fn logs(stack: &Stack) -> (Vec<String>, Vec<String>) {
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    (
        (0..stack.replicas())
            .map(|index| read(stack.store_log_path(index)))
            .collect(),
        (0..stack.replicas())
            .map(|index| stack.envoy_log(index))
            .collect(),
    )
}
