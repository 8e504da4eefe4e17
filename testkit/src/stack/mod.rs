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
//! This file holds the start-up; `inspect.rs` what a harness reads, `ports.rs` the ports
//! handed out before it, `render.rs` each Envoy's configuration, `options.rs` what runs,
//! `parts.rs` how each part is started, `faults.rs` what a harness does to a running stack,
//! `extra.rs` further Envoys and lease-stores beside it (benchmarks, configuration checks),
//! `network.rs` the stack whose parts run in network namespaces and the link faults it
//! allows ([`StackOptions::own_networks`], [`Stack::cut`]).
//! `versions.rs` parts that run other programs than the stack's (a rollout, a rollback).
//! `sidecar.rs` the store's inbound sidecar and the workloads' certificates of a stack whose
//! filters call the store with their mesh identity ([`StackOptions::mesh_identity`]).

mod extra;
mod faults;
mod inspect;
mod lifecycle;
mod network;
mod options;
mod parts;
mod ports;
mod render;
mod sidecar;
mod versions;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::binaries::Binaries;
use crate::database::Database;
use crate::ha::{HaCluster, HaOptions};
use crate::net::NetLab;
use crate::pg::{PgCluster, PgOptions};
use crate::process::{free_port, wait_http_ok};

pub use extra::{EnvoyStart, ExtraEnvoy, ExtraStore, envoy_alone, envoy_alone_as};
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
use ports::PlanPorts;
use render::{Sites, lds_path_of, render_envoy_config, write_envoy_config};
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
                .map(|(index, (&port, &admin))| Store {
                    place: places.stores[index],
                    binaries: options
                        .store_binaries
                        .get(&index)
                        .cloned()
                        .unwrap_or_else(|| binaries.clone()),
                    port,
                    admin,
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

    async fn start_store_with(&mut self, index: usize, migrate: bool) {
        let place = self.store(index).place;
        let url = network::database_url(&self.database, place, self.host_side);
        let token = self.options.filter_token();
        let port = self.store(index).port;
        let admin_port = self.store(index).admin;
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

fn unique_temp_dir() -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "keyflight-stack-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}
