//! The one stack launcher: Postgres (one node or a Patroni pair), lease-store replicas, the
//! demo upstream and Envoys running the real `.wasm`, started on free (or the shipped)
//! ports and stopped when the [`Stack`] drops (Envoys first).
//!
//! Everything that runs keyflight runs it through here: `make up` / `make demo` (the
//! `keyflight-stack` binary), the end-to-end tests (`keyflight-e2e` wraps a [`Stack`] with
//! its client helpers), `make chaos` and `make bench`. So a new part, replica or fault is
//! added once.
//!
//! Envoy's configuration is rendered from the shipped `envoy/*.yaml` ([`crate::envoy_config`]):
//! only ports, the wasm path and the plugin JSON are swapped, then the [`StackOptions`]'
//! edits applied, so the file users run is the file every harness proves.
//!
//! Each part logs to one file under the stack's directory (`logs/<part>.log`, continued
//! across restarts); [`Stack::describe`] says what runs where as JSON (what
//! `keyflight-stack up` writes to `stack.json`). A stack without a directory of its own
//! ([`StackOptions::run_dir`]) uses a temp dir, removed when it drops unless a panic (a
//! failing test) is unwinding, in which case the paths are printed.
//!
//! This file holds the start-up and what a harness reads; `options.rs` what runs,
//! `parts.rs` how each part is started, `faults.rs` what a harness does to a running stack,
//! `extra.rs` further Envoys and lease-stores beside it (benchmarks, configuration checks),
//! `network.rs` the stack whose parts run in network namespaces and the link faults it
//! allows ([`StackOptions::own_networks`], [`Stack::cut`]).
//! `versions.rs` parts that run other programs than the stack's (a rollout, a rollback).
//! `sidecar.rs` the store's inbound sidecar and the workloads' certificates of a stack whose
//! filters call the store with their mesh identity ([`StackOptions::mesh_identity`]).

mod extra;
mod faults;
mod lifecycle;
mod network;
mod options;
mod parts;
mod sidecar;
mod versions;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::binaries::Binaries;
use crate::database::Database;
use crate::envoy_config::{self, Ports};
use crate::envoy_variants::EnvoyEdit;
use crate::ha::{HaCluster, HaOptions};
use crate::lds;
use crate::net::NetLab;
use crate::pg::{PgCluster, PgOptions};
use crate::process::{free_port, wait_http_ok};

pub use extra::{EnvoyStart, ExtraEnvoy, ExtraStore, envoy_alone};
pub use faults::Crash;
pub use lifecycle::{WasmVms, wasm_vms_at};
pub use network::{NetFault, SLOW_LINK_BYTES_PER_S};
pub use options::{PortPlan, SHARED_AUTHORITY, StackOptions, VIA_HEADER, via_value};
pub use parts::{
    ADMIN_TOKEN, RECONCILE_TOKEN, envoy_command, lease_store_command, upstream_command,
};
use parts::{
    Envoy, Part, Place, Restart, Sidecar, Store, remove_hot_restart_memory,
    restartable_envoy_command, upstream_command_at,
};
pub use sidecar::{Mesh, STORE_SPIFFE_ID};

/// How long a part may take to answer its readiness probe.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running stack. Fields drop in declaration order: Envoys first, Postgres, then the
/// network namespaces last.
pub struct Stack {
    envoys: Vec<Envoy>,
    /// The store's inbound sidecar of a [`StackOptions::mesh_identity`] stack.
    sidecar: Option<Sidecar>,
    upstream: Part,
    upstream_port: u16,
    /// Where the upstream listens (and Postgres, on a stack with its own networks).
    host_side: IpAddr,
    stores: Vec<Store>,
    database: Database,
    binaries: Binaries,
    options: StackOptions,
    dir: PathBuf,
    /// The directory is the stack's own temp dir (removed on drop when nothing failed).
    temporary: bool,
    /// The namespaces of a stack with [`StackOptions::own_networks`].
    net: Option<NetLab>,
}

impl Stack {
    /// Starts every part and waits until each answers its readiness probe; panics with the
    /// failing part's log otherwise.
    pub async fn start(options: StackOptions) -> Stack {
        let binaries = options.binaries.clone().unwrap_or_else(Binaries::locate);
        let (dir, temporary) = match &options.dir {
            Some(dir) => (dir.clone(), false),
            None => (unique_temp_dir(), true),
        };
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("create {}: {e}", logs.display()));

        assert!(
            options.mesh.is_none()
                || (options.replicas == 1
                    && options.ports == PortPlan::Free
                    && !options.own_networks),
            "a mesh identity stack runs one lease-store on free ports on the host"
        );
        if options.native {
            crate::binaries::require_native_module();
        }
        let envoy_count = options.envoy_count();
        let mut plan = PlanPorts::new(options.ports, envoy_count, options.replicas);
        let sidecar = options.mesh.as_ref().map(|mesh| {
            let (port, admin) = (free_port(), free_port());
            let config = dir.join("store-sidecar.yaml");
            let store = SocketAddr::new(Place::LOOPBACK.ip, plan.lease_stores[0]);
            let listen = SocketAddr::new(Place::LOOPBACK.ip, port);
            std::fs::write(&config, sidecar::sidecar_config(mesh, listen, admin, store))
                .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
            let mut part = Part::new("store-sidecar", &logs);
            part.spawn(envoy_command(
                &binaries,
                &config,
                &options.envoy_log_level,
                "",
            ));
            Sidecar { port, admin, part }
        });
        if let Some(sidecar) = &sidecar {
            plan.store_route = vec![sidecar.port];
        }
        let (net, places) = network::places(&options);
        let mut envoys: Vec<Envoy> = (0..envoy_count)
            .map(|index| Envoy {
                place: places.envoys[index],
                binaries: options
                    .envoy_binaries
                    .get(&index)
                    .cloned()
                    .unwrap_or_else(|| binaries.clone()),
                ports: plan.envoy(index),
                config: dir.join(format!("envoy-{index}.yaml")),
                base_id_file: dir.join(format!("envoy-{index}.base-id")),
                epoch: 0,
                part: Part::new(&format!("envoy-{index}"), &logs),
            })
            .collect();
        // Envoy starts while Postgres initializes: its clusters are static, so it needs
        // nothing else to be up.
        let sites = Sites {
            envoys: places.envoys.clone(),
            stores: places.stores.clone(),
            host_side: places.host_side,
        };
        for (index, envoy) in envoys.iter_mut().enumerate() {
            write_envoy_config(
                &envoy.binaries,
                &options,
                index,
                &envoy.ports,
                &sites,
                &envoy.config,
            );
            let command = restartable_envoy_command(
                &envoy.binaries,
                &envoy.config,
                &options.envoy_log_level,
                &options.filter_token(),
                Restart::First {
                    base_id_file: &envoy.base_id_file,
                },
            );
            envoy
                .part
                .spawn(network::inside(net.as_ref(), envoy.place, command));
        }
        let database = start_database(&options, net.as_ref()).await;
        // The upstream starts once Postgres runs: it may keep its payments there.
        let mut upstream = Part::new("demo-upstream", &logs);
        upstream.spawn(upstream_command_at(
            &binaries,
            SocketAddr::new(places.host_side, plan.upstream),
            options
                .upstream_effects
                .then(|| database.url())
                .as_deref()
                .map(|url| (url, dir.as_path())),
        ));
        let mut stack = Stack {
            envoys,
            sidecar,
            upstream,
            upstream_port: plan.upstream,
            host_side: places.host_side,
            stores: plan
                .lease_stores
                .iter()
                .zip(&plan.lease_store_admins)
                .enumerate()
                .map(|(index, (&port, &admin_port))| Store {
                    place: places.stores[index],
                    binaries: options
                        .store_binaries
                        .get(&index)
                        .cloned()
                        .unwrap_or_else(|| binaries.clone()),
                    port,
                    admin_port,
                    part: Part::new(&format!("lease-store-{index}"), &logs),
                })
                .collect(),
            database,
            binaries,
            options,
            dir,
            temporary,
            net,
        };
        // One replica migrates; the others start once the schema is in.
        for index in 0..stack.stores.len() {
            stack.start_store_with(index, index == 0).await;
        }
        stack.wait_healthy().await;
        stack
    }

    /// Waits until every running part answers its readiness probe.
    pub async fn wait_healthy(&mut self) {
        let ready = format!("http://{}/stats", self.upstream_address());
        wait_http_ok(&ready, READY_TIMEOUT, self.upstream.child_mut()).await;
        if let Some(sidecar) = &mut self.sidecar {
            let ready = format!("http://127.0.0.1:{}/ready", sidecar.admin);
            wait_http_ok(&ready, READY_TIMEOUT, sidecar.part.child_mut()).await;
        }
        for store in &mut self.stores {
            let ready = format!("http://{}:{}/readyz", store.place.ip, store.port);
            wait_http_ok(&ready, READY_TIMEOUT, store.part.child_mut()).await;
        }
        for index in 0..self.envoys.len() {
            self.wait_envoy(index).await;
        }
    }

    /// How many Envoys run (as many as lease-stores, except in a mesh identity stack,
    /// which runs one Envoy per workload and one lease-store).
    pub fn replicas(&self) -> usize {
        self.envoys.len()
    }

    /// How many lease-stores run.
    pub fn store_replicas(&self) -> usize {
        self.stores.len()
    }

    /// The port of the store's inbound sidecar (mutual TLS), in a mesh identity stack.
    pub fn sidecar_port(&self) -> Option<u16> {
        self.sidecar.as_ref().map(|sidecar| sidecar.port)
    }

    /// Envoy `index`'s ports (listener, admin, the lease-stores and upstream it reaches).
    pub fn envoy_ports(&self, index: usize) -> &Ports {
        &self.envoy(index).ports
    }

    /// Lease-store `index`'s port.
    pub fn store_port(&self, index: usize) -> u16 {
        self.store(index).port
    }

    /// Lease-store `index`'s admin port (`/v1/records…`, the operator CLI's).
    pub fn store_admin_port(&self, index: usize) -> u16 {
        self.store(index).admin_port
    }

    /// The demo upstream's port.
    pub fn upstream_port(&self) -> u16 {
        self.upstream_port
    }

    /// Envoy `index`'s address: its listener and admin interface are on it (`127.0.0.1`
    /// unless the stack runs [`StackOptions::own_networks`]).
    pub fn envoy_ip(&self, index: usize) -> IpAddr {
        self.envoy(index).place.ip
    }

    /// Lease-store `index`'s address (see [`Stack::envoy_ip`]).
    pub fn store_ip(&self, index: usize) -> IpAddr {
        self.store(index).place.ip
    }

    /// Where the demo upstream listens.
    pub fn upstream_address(&self) -> SocketAddr {
        SocketAddr::new(self.host_side, self.upstream_port)
    }

    /// The database the lease-stores run on.
    pub fn database(&self) -> &Database {
        &self.database
    }

    /// The programs this stack runs.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// What this stack runs.
    pub fn options(&self) -> &StackOptions {
        &self.options
    }

    /// Where its configs and logs are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Envoy `index`'s log (every process of that Envoy, across restarts).
    pub fn envoy_log_path(&self, index: usize) -> &Path {
        self.envoy(index).part.log()
    }

    /// Lease-store `index`'s log.
    pub fn store_log_path(&self, index: usize) -> &Path {
        self.store(index).part.log()
    }

    /// Everything Envoy `index` logged so far.
    pub fn envoy_log(&self, index: usize) -> String {
        std::fs::read_to_string(self.envoy_log_path(index)).unwrap_or_default()
    }

    /// Envoy `index`'s process id, while it runs.
    pub fn envoy_pid(&self, index: usize) -> Option<u32> {
        self.envoy(index).part.pid()
    }

    /// Lease-store `index`'s process id, while it runs.
    pub fn store_pid(&self, index: usize) -> Option<u32> {
        self.store(index).part.pid()
    }

    /// The upstream's process id, while it runs.
    pub fn upstream_pid(&self) -> Option<u32> {
        self.upstream.pid()
    }

    /// What runs where, as JSON: ports, process ids, logs, configs, the database URL and
    /// the tokens (what `keyflight-stack up` writes to `stack.json`).
    pub fn describe(&self) -> Value {
        let envoys: Vec<Value> = self
            .envoys
            .iter()
            .map(|envoy| {
                json!({
                    "listener": envoy.ports.listener,
                    "admin": envoy.ports.admin,
                    "pid": envoy.part.pid(),
                    "log": envoy.part.log(),
                    "config": envoy.config,
                })
            })
            .collect();
        let stores: Vec<Value> = self
            .stores
            .iter()
            .map(|store| json!({"port": store.port, "pid": store.part.pid(), "log": store.part.log()}))
            .collect();
        let mut described = json!({
            "dir": self.dir,
            "envoys": envoys,
            "lease_stores": stores,
            "upstream": {
                "port": self.upstream_port,
                "pid": self.upstream.pid(),
                "log": self.upstream.log(),
            },
            "postgres": {
                "url": self.database.url(),
                "replicated": matches!(self.database, Database::Replicated(_)),
                "partitions": self.database.partitions().iter().map(PgCluster::url).collect::<Vec<_>>(),
            },
            "tokens": {"filter": self.options.filter_token(), "admin": ADMIN_TOKEN},
        });
        if let Some(sidecar) = &self.sidecar {
            described["store_sidecar"] = json!({
                "port": sidecar.port,
                "admin": sidecar.admin,
                "pid": sidecar.part.pid(),
                "log": sidecar.part.log(),
            });
        }
        if self.net.is_some() {
            described["addresses"] = json!({
                "envoys": self.envoys.iter().map(|e| e.place.ip).collect::<Vec<_>>(),
                "lease_stores": self.stores.iter().map(|s| s.place.ip).collect::<Vec<_>>(),
                "host_side": self.host_side,
            });
        }
        described
    }

    fn envoy(&self, index: usize) -> &Envoy {
        self.envoys.get(index).unwrap_or_else(|| {
            panic!(
                "there is no Envoy {index}: the stack runs {}",
                self.envoys.len()
            )
        })
    }

    fn store(&self, index: usize) -> &Store {
        self.stores.get(index).unwrap_or_else(|| {
            panic!(
                "there is no lease-store {index}: the stack runs {}",
                self.stores.len()
            )
        })
    }

    async fn start_store_with(&mut self, index: usize, migrate: bool) {
        let place = self.store(index).place;
        let url = network::database_url(&self.database, place, self.host_side);
        let token = self.options.filter_token();
        let port = self.store(index).port;
        let admin_port = self.store(index).admin_port;
        let mut command = lease_store_command(
            &self.store(index).binaries,
            &url,
            (port, admin_port),
            &token,
            migrate,
        );
        command.envs(self.options.store_env.iter().map(|(k, v)| (k, v)));
        let partitions = network::partition_urls(&self.database, place, self.host_side);
        if !partitions.is_empty() {
            command.env("KEYFLIGHT_PARTITION_URLS", partitions.join(","));
        }
        if let Some(mesh) = &self.options.mesh {
            // The caller is its mesh identity, which only the sidecar vouches for: it connects
            // from 127.0.0.6, the store's default trusted peer.
            command
                .arg("--trust-xfcc")
                .env_remove("KEYFLIGHT_TOKEN")
                .env("KEYFLIGHT_WORKLOADS", mesh.allowlist());
        }
        // Both listeners on the store's own address (loopback unless it has a namespace).
        command.env(
            "KEYFLIGHT_LISTEN",
            SocketAddr::new(place.ip, port).to_string(),
        );
        command.env(
            "KEYFLIGHT_ADMIN_LISTEN",
            SocketAddr::new(place.ip, admin_port).to_string(),
        );
        let command = network::inside(self.net.as_ref(), place, command);
        let store = &mut self.stores[index];
        store.part.spawn(command);
        let ready = format!("http://{}:{}/readyz", place.ip, store.port);
        wait_http_ok(&ready, READY_TIMEOUT, store.part.child_mut()).await;
    }

    async fn wait_envoy(&mut self, index: usize) {
        let envoy = &mut self.envoys[index];
        let ready = format!("http://{}:{}/ready", envoy.place.ip, envoy.ports.admin);
        wait_http_ok(&ready, READY_TIMEOUT, envoy.part.child_mut()).await;
    }

    /// Envoy `index`'s config rendered again from the options (after a plugin change).
    fn render_envoy(&self, index: usize) -> String {
        render_envoy_config(
            &self.envoy(index).binaries,
            &self.options,
            index,
            &self.envoy(index).ports,
            &self.sites(),
        )
    }

    /// Where every part of this stack runs.
    fn sites(&self) -> Sites {
        Sites {
            envoys: self.envoys.iter().map(|e| e.place).collect(),
            stores: self.stores.iter().map(|s| s.place).collect(),
            host_side: self.host_side,
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for envoy in &mut self.envoys {
            envoy.part.kill();
            remove_hot_restart_memory(&envoy.base_id_file);
        }
        if std::thread::panicking() {
            eprintln!(
                "keyflight stack: kept for inspection in {}",
                self.dir.display()
            );
            let envoys = self.envoys.iter().map(|envoy| &envoy.part);
            for part in envoys.chain(self.stores.iter().map(|store| &store.part)) {
                eprintln!("--- {} tail ---\n{}", part.log().display(), part.log_tail());
            }
        } else if self.temporary {
            // Best effort: a leftover temp dir harms nothing.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The ports of a stack about to start.
struct PlanPorts {
    envoys: Vec<(u16, u16)>,
    lease_stores: Vec<u16>,
    /// Where the Envoys reach the lease-stores: the stores themselves, or their sidecar.
    store_route: Vec<u16>,
    lease_store_admins: Vec<u16>,
    upstream: u16,
}

/// The shipped stack's first lease-store admin port (`lease-store serve`'s default); a
/// second replica takes the next.
const SHIPPED_STORE_ADMIN_PORT: u16 = 9480;

impl PlanPorts {
    fn new(plan: PortPlan, envoys: usize, replicas: usize) -> PlanPorts {
        match plan {
            PortPlan::Free => {
                let lease_stores: Vec<u16> = (0..replicas).map(|_| free_port()).collect();
                PlanPorts {
                    envoys: (0..envoys).map(|_| (free_port(), free_port())).collect(),
                    store_route: lease_stores.clone(),
                    lease_stores,
                    lease_store_admins: (0..replicas).map(|_| free_port()).collect(),
                    upstream: free_port(),
                }
            }
            PortPlan::Shipped => {
                let first = envoy_config::shipped_ports();
                let second = envoy_config::shipped_second_replica_ports();
                PlanPorts {
                    envoys: [
                        (first.listener, first.admin),
                        (second.listener, second.admin),
                    ][..replicas]
                        .to_vec(),
                    lease_stores: second.lease_stores[..replicas].to_vec(),
                    store_route: second.lease_stores[..replicas].to_vec(),
                    lease_store_admins: (SHIPPED_STORE_ADMIN_PORT..).take(replicas).collect(),
                    upstream: first.upstream,
                }
            }
        }
    }

    fn envoy(&self, index: usize) -> Ports {
        let (listener, admin) = self.envoys[index];
        Ports {
            listener,
            admin,
            lease_stores: self.store_route.clone(),
            upstream: self.upstream,
        }
    }
}

async fn start_database(options: &StackOptions, net: Option<&NetLab>) -> Database {
    if options.replicated {
        return Database::Replicated(Box::new(HaCluster::start(HaOptions::default()).await));
    }
    let pg = PgOptions {
        durable: options.durable,
        also_listen: net.map(NetLab::host_side_ip),
        ..PgOptions::default()
    };
    let start = |pg: PgOptions| async move {
        tokio::task::spawn_blocking(move || PgCluster::start_with(pg))
            .await
            .unwrap_or_else(|e| panic!("starting Postgres failed: {e}"))
    };
    if options.partitions == 0 {
        return Database::Single(start(pg).await);
    }
    let router = start(pg).await;
    let mut partitions = Vec::with_capacity(options.partitions);
    for _ in 0..options.partitions {
        partitions.push(start(pg).await);
    }
    Database::Partitioned { router, partitions }
}

/// Where the parts of a stack run: every Envoy and lease-store, and the host side (the
/// upstream, Postgres).
struct Sites {
    envoys: Vec<Place>,
    stores: Vec<Place>,
    host_side: IpAddr,
}

/// The shipped config for Envoy `index`: `envoy/demo.yaml` for one lease-store,
/// `envoy/two-replicas.yaml` for two (their `native-` twins for the native adapter), with
/// the wasm, the plugin JSON, each socket on its part's address (a stack with its own
/// networks), the options' edits and (for a tagged stack) the [`VIA_HEADER`].
fn render_envoy_config(
    binaries: &Binaries,
    options: &StackOptions,
    index: usize,
    ports: &Ports,
    sites: &Sites,
) -> String {
    let wasm = binaries.wasm.display().to_string();
    let rendered = if options.native {
        envoy_config::render_native(ports, &options.plugin)
    } else {
        envoy_config::render_shipped(ports, &wasm, &options.plugin)
    };
    let mut rendered = rendered.unwrap_or_else(|e| panic!("{e}"));
    if options.own_networks {
        rendered = network::place_sockets(&rendered, ports, index, sites);
    }
    let tag = options.tag_envoys.then(|| EnvoyEdit::AddRequestHeader {
        name: VIA_HEADER.to_owned(),
        value: via_value(index),
    });
    let store_mtls = options.mesh.as_ref().map(|mesh| {
        let workload = mesh.workload_cert(index);
        EnvoyEdit::StoreMtls {
            cert: workload.cert,
            key: workload.key,
            ca: mesh.ca(),
            store_id: STORE_SPIFFE_ID.to_owned(),
        }
    });
    for edit in options.envoy_edits.iter().chain(&tag).chain(&store_mtls) {
        rendered = edit.apply(&rendered).unwrap_or_else(|e| panic!("{e}"));
    }
    rendered
}

/// Writes Envoy `index`'s config to `path`; every Envoy of a reconfigurable stack gets its
/// listener in an LDS file beside it ([`lds_path_of`]).
fn write_envoy_config(
    binaries: &Binaries,
    options: &StackOptions,
    index: usize,
    ports: &Ports,
    sites: &Sites,
    path: &Path,
) {
    let rendered = render_envoy_config(binaries, options, index, ports, sites);
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()))
    };
    if options.listener_from_file {
        let lds_path = lds_path_of(path);
        let split = lds::split(&rendered, &lds_path).unwrap_or_else(|e| panic!("{e}"));
        write(&lds_path, &split.listeners);
        write(path, &split.bootstrap);
    } else {
        write(path, &rendered);
    }
}

/// Where the listener of the bootstrap at `config` lives when it is served from a file.
fn lds_path_of(config: &Path) -> PathBuf {
    config.with_extension("lds.json")
}

fn unique_temp_dir() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "keyflight-stack-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}
