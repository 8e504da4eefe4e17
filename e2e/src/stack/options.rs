//! What a test stack runs: [`StackOptions`] and its builder methods.

use serde_json::{Map, Value};

use crate::envoy_config;
use crate::envoy_variants::EnvoyEdit;

/// What a test stack runs: the plugin configuration Envoy hands the filter, how many
/// Envoy + lease-store replicas, and edits of the Envoy config.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The plugin JSON (`config.configuration` of the wasm filter).
    pub plugin: Value,
    /// Two Envoys and two lease-stores instead of one each.
    pub(super) two_replicas: bool,
    /// Applied in order to every rendered Envoy config.
    pub(super) envoy_edits: Vec<EnvoyEdit>,
    /// Extra environment of every lease-store (e.g. `KEYFLIGHT_MAX_BODY_BYTES`).
    pub(super) store_env: Vec<(String, String)>,
    /// Serve replica 0's listener from an LDS file, so [`Stack::reconfigure`] can push a
    /// new plugin configuration.
    pub(super) listener_from_file: bool,
    /// Run on a replicated Postgres (etcd + two Patroni nodes) instead of one node.
    pub(super) replicated: bool,
}

impl Default for StackOptions {
    /// The plugin configuration `envoy/demo.yaml` ships, one replica.
    fn default() -> Self {
        let plugin = envoy_config::shipped_plugin_config(&envoy_config::shipped_demo_yaml())
            .unwrap_or_else(|e| panic!("{e}"));
        StackOptions {
            plugin,
            two_replicas: false,
            envoy_edits: Vec::new(),
            store_env: Vec::new(),
            listener_from_file: false,
            replicated: false,
        }
    }
}

impl StackOptions {
    /// Edits the first policy (the demo's `payments` policy).
    pub fn policy(mut self, edit: impl FnOnce(&mut Map<String, Value>)) -> Self {
        let policy = self.plugin["policies"][0]
            .as_object_mut()
            .unwrap_or_else(|| panic!("the plugin config has no policies[0] object"));
        edit(policy);
        self
    }

    /// Edits the whole plugin JSON.
    pub fn plugin(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        edit(&mut self.plugin);
        self
    }

    /// Runs the two-replica set-up: two Envoys and two lease-stores on the same Postgres, in
    /// front of the same upstream; both Envoys run `envoy/two-replicas.yaml`, which reaches
    /// both lease-stores.
    pub fn two_replicas(mut self) -> Self {
        self.two_replicas = true;
        self
    }

    /// Changes the Envoy config beyond the plugin JSON (see [`EnvoyEdit`]).
    pub fn envoy(mut self, edit: EnvoyEdit) -> Self {
        self.envoy_edits.push(edit);
        self
    }

    /// Serves replica 0's listener from a file (LDS) instead of the bootstrap, so that
    /// [`Stack::reconfigure`] can push a new plugin configuration while Envoy runs.
    pub fn reconfigurable(mut self) -> Self {
        self.listener_from_file = true;
        self
    }

    /// Runs the database as a replicated Postgres that fails over (etcd + two Patroni nodes
    /// in synchronous mode); the lease-store gets the multi-host URL with
    /// `target_session_attrs=read-write`. Needs `make ha-prereqs`.
    pub fn replicated_postgres(mut self) -> Self {
        self.replicated = true;
        self
    }

    /// Sets an environment variable of every lease-store the stack starts.
    pub fn store_env(mut self, name: &str, value: &str) -> Self {
        self.store_env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The token the filter presents to the lease-store, as the plugin JSON says.
    pub(super) fn filter_token(&self) -> String {
        self.plugin["lease_store"]["token"]
            .as_str()
            .unwrap_or("e2e-filter-token")
            .to_owned()
    }
}
