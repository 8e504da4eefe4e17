//! What a stack runs: [`StackOptions`] and its builder methods.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::sidecar::Mesh;
use crate::binaries::Binaries;
use crate::envoy_config;
use crate::envoy_variants::EnvoyEdit;

/// The lease-store token of every stack (`make up` included, so `keyflight-bench cycle
/// --token demo-filter-token` reaches its store): a demo value, never a real one.
pub const DEMO_STORE_TOKEN: &str = "demo-filter-token";

/// The header each Envoy of a [`StackOptions::tag_envoys`] stack adds to what it forwards
/// (the demo upstream logs it: `demo-upstream/src/executions.rs`).
pub const VIA_HEADER: &str = "x-keyflight-via";

/// The value of [`VIA_HEADER`] for Envoy `index`.
pub fn via_value(index: usize) -> String {
    format!("envoy-{index}")
}

/// The service name the replicas of a two-replica stack are reached by, as behind a load
/// balancer: the authority is part of the scope (`docs/identity.md#the-scope`), so
/// clients of a two-replica stack send it as `host`.
pub const SHARED_AUTHORITY: &str = "payments.keyflight.test";

/// Which ports the parts listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortPlan {
    /// Free ports, chosen at start: any number of stacks side by side (tests, chaos, bench).
    Free,
    /// The ports the shipped `envoy/*.yaml` name (`make up`: Envoy on :10000, the
    /// lease-store on :8480, the upstream on :8081, a second replica on :10001 / :8481).
    Shipped,
}

/// What a stack runs: the plugin configuration every Envoy hands the filter, how many
/// Envoy + lease-store replicas, the database, and edits of the Envoy config.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The plugin JSON (`config.configuration` of the wasm filter).
    pub plugin: Value,
    pub(super) replicas: usize,
    /// Applied in order to every rendered Envoy config.
    pub(super) envoy_edits: Vec<EnvoyEdit>,
    /// Extra environment of every lease-store (e.g. `KEYFLIGHT_MAX_BODY_BYTES`).
    pub(super) store_env: Vec<(String, String)>,
    /// Serve every Envoy's listener from an LDS file, so a new plugin configuration or
    /// module can be pushed while Envoy runs ([`super::Stack::reconfigure`],
    /// [`super::Stack::upgrade_wasm`]).
    pub(super) listener_from_file: bool,
    pub(super) replicated: bool,
    /// How many partitions behind a PL/Proxy router; 0: one database.
    pub(super) partitions: usize,
    pub(super) durable: bool,
    /// Each Envoy and lease-store in its own network namespace ([`StackOptions::own_networks`]).
    pub(super) own_networks: bool,
    pub(super) ports: PortPlan,
    /// Where configs and logs go; `None`: a temp dir, removed when the stack drops
    /// unless the thread is panicking.
    pub(super) dir: Option<PathBuf>,
    pub(super) tag_envoys: bool,
    pub(super) envoy_log_level: String,
    pub(super) binaries: Option<Binaries>,
    /// Programs of single Envoys, by index, instead of the stack's (a mixed-version mesh).
    pub(super) envoy_binaries: BTreeMap<usize, Binaries>,
    /// Programs of single lease-stores, by index, instead of the stack's.
    pub(super) store_binaries: BTreeMap<usize, Binaries>,
    /// The store behind its own sidecar, the filters calling it with their mesh identity
    /// ([`StackOptions::mesh_identity`]).
    pub(super) mesh: Option<Mesh>,
    /// The demo upstream keeps its payments in the stack's Postgres
    /// ([`StackOptions::upstream_effects`]).
    pub(super) upstream_effects: bool,
    /// Every Envoy runs the native adapter (`envoy/native-demo.yaml`) instead of the Wasm
    /// filter ([`StackOptions::native_adapter`]).
    pub(super) native: bool,
}

impl Default for StackOptions {
    /// The plugin configuration `envoy/demo.yaml` ships, one replica, a fast throwaway
    /// Postgres, free ports.
    fn default() -> Self {
        let plugin = envoy_config::shipped_plugin_config(&envoy_config::shipped_demo_yaml())
            .unwrap_or_else(|e| panic!("{e}"));
        StackOptions {
            plugin,
            replicas: 1,
            envoy_edits: Vec::new(),
            store_env: Vec::new(),
            listener_from_file: false,
            replicated: false,
            partitions: partitions_from_env(),
            durable: false,
            own_networks: false,
            ports: PortPlan::Free,
            dir: None,
            tag_envoys: false,
            envoy_log_level: "info".to_owned(),
            binaries: None,
            envoy_binaries: BTreeMap::new(),
            store_binaries: BTreeMap::new(),
            mesh: None,
            upstream_effects: false,
            native: native_from_env(),
        }
    }
}

/// How many partitions a default stack's records are on: `KEYFLIGHT_STACK_PARTITIONS`
/// (`make e2e-partitioned` runs the end-to-end suite so), else one database.
fn partitions_from_env() -> usize {
    std::env::var("KEYFLIGHT_STACK_PARTITIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Whether a default stack runs the native adapter: `KEYFLIGHT_ADAPTER=native` runs any
/// scenario against it (`filter-native/README.md#not-yet-equal` says which fail, and why).
fn native_from_env() -> bool {
    std::env::var("KEYFLIGHT_ADAPTER").is_ok_and(|adapter| adapter == "native")
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
    pub fn two_replicas(self) -> Self {
        self.replicas(2)
    }

    /// Runs `replicas` Envoys and as many lease-stores (the shipped configs have one or two).
    pub fn replicas(mut self, replicas: usize) -> Self {
        assert!(
            (1..=2).contains(&replicas),
            "the shipped Envoy configs run one or two replicas, not {replicas}"
        );
        self.replicas = replicas;
        self
    }

    /// Changes the Envoy config beyond the plugin JSON (see [`EnvoyEdit`]).
    pub fn envoy(mut self, edit: EnvoyEdit) -> Self {
        self.envoy_edits.push(edit);
        self
    }

    /// Serves every Envoy's listener from a file (LDS) instead of the bootstrap, so that a
    /// new plugin configuration or module can be pushed while Envoy runs.
    pub fn reconfigurable(mut self) -> Self {
        self.listener_from_file = true;
        self
    }

    /// Runs the database as a replicated Postgres that fails over (etcd + two Patroni nodes
    /// in synchronous mode); the lease-store gets the multi-host URL with
    /// `target_session_attrs=read-write`. Needs `make ha-prereqs`.
    pub fn replicated_postgres(mut self) -> Self {
        self.replicated = true;
        self.partitions = 0;
        self
    }

    /// Runs the records on `partitions` throwaway Postgres partitions behind a PL/Proxy
    /// router (`docs/distributed-sql.md`; `make partition-prereqs`): the lease-stores send
    /// every statement to the router and listen for settles on every partition.
    pub fn partitioned(mut self, partitions: usize) -> Self {
        assert!(
            (1..=64).contains(&partitions),
            "a partitioned database has 1 to 64 partitions (its slots), not {partitions}"
        );
        self.partitions = partitions;
        self
    }

    /// Runs a single Postgres with production durability (`fsync` on): benchmarks and the
    /// demo; tests default to a fast one.
    pub fn durable_postgres(mut self) -> Self {
        self.durable = true;
        self
    }

    /// Runs each Envoy and each lease-store in its own network namespace on a bridge
    /// ([`crate::net::NetLab`]), Postgres and the upstream on the host side of it, so that
    /// [`super::Stack::cut`] can partition, drop one way or slow the links between them.
    /// Every part is then reached at its own address ([`super::Stack::envoy_ip`], …), not
    /// `127.0.0.1`. Needs root and `nft` (`make net-prereqs`); a single Postgres only.
    pub fn own_networks(mut self) -> Self {
        self.own_networks = true;
        self
    }

    /// The demo upstream keeps each payment as a row in the stack's Postgres, committed with
    /// its `keyflight-effects` record (`docs/effects.md`), and counts them at `GET /effects`.
    /// A real service has its own database; sharing the stack's keeps the stack small.
    pub fn upstream_effects(self) -> Self {
        self.upstream_effects_if(true)
    }

    /// [`StackOptions::upstream_effects`] when `on`.
    pub fn upstream_effects_if(mut self, on: bool) -> Self {
        self.upstream_effects = on;
        self
    }

    /// Every Envoy runs the native adapter, `libkeyflight_filter_native.so` from
    /// [`crate::binaries::native_module_dir`]: `envoy/native-demo.yaml` (or
    /// `envoy/native-two-replicas.yaml`) in place of the Wasm filter's config.
    pub fn native_adapter(mut self) -> Self {
        self.native = true;
        self
    }

    /// Whether every Envoy runs the native adapter ([`StackOptions::native_adapter`], or
    /// `KEYFLIGHT_ADAPTER=native` for a default stack).
    pub fn runs_native_adapter(&self) -> bool {
        self.native
    }

    /// Sets an environment variable of every lease-store the stack starts.
    pub fn store_env(mut self, name: &str, value: &str) -> Self {
        self.store_env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Listens on the ports [`PortPlan`] names.
    pub fn ports(mut self, ports: PortPlan) -> Self {
        self.ports = ports;
        self
    }

    /// Keeps configs and logs (one per part, continued across restarts) under `dir`.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Each Envoy adds [`VIA_HEADER`]` = envoy-N` to what it forwards, so the upstream's
    /// execution log says which Envoy dispatched each execution.
    pub fn tag_envoys(mut self) -> Self {
        self.tag_envoys = true;
        self
    }

    /// Envoy's `--log-level` (`info` by default: the filter's lines are evidence).
    pub fn envoy_log_level(mut self, level: &str) -> Self {
        level.clone_into(&mut self.envoy_log_level);
        self
    }

    /// The Envoys' `--log-level` these options start them at.
    pub fn envoy_logging(&self) -> &str {
        &self.envoy_log_level
    }

    /// Runs these programs instead of [`Binaries::locate`]'s.
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    /// Runs Envoy `index` with `binaries`' Envoy and `.wasm` (e.g. the previous release's,
    /// [`crate::previous_release`]), the others with the stack's.
    pub fn envoy_binaries(mut self, index: usize, binaries: Binaries) -> Self {
        self.envoy_binaries.insert(index, binaries);
        self
    }

    /// Runs lease-store `index` with `binaries`' lease-store, the others with the stack's.
    /// Store 0 applies the migrations, so it should be the newest.
    pub fn store_binaries(mut self, index: usize, binaries: Binaries) -> Self {
        self.store_binaries.insert(index, binaries);
        self
    }

    /// Also writes the filter token into the plugin configuration, where the previous
    /// release reads it (it knows no other place; this release takes it from the VM's
    /// environment and ignores the inline one with a warning,
    /// `docs/configuration.md#caller-identity`): for stacks where the previous release runs
    /// or may be rolled in.
    pub fn inline_filter_token(self) -> Self {
        let token = self.filter_token();
        self.plugin(|plugin| plugin["lease_store"]["token"] = Value::String(token))
    }

    /// The token the filter presents to the lease-store ([`DEMO_STORE_TOKEN`] unless the
    /// plugin JSON says otherwise): every Envoy gets it in its
    /// environment, and the stores accept it; a plugin JSON with the deprecated inline
    /// `lease_store.token` names it instead.
    pub fn filter_token(&self) -> String {
        self.plugin["lease_store"]["token"]
            .as_str()
            .unwrap_or(DEMO_STORE_TOKEN)
            .to_owned()
    }
}
