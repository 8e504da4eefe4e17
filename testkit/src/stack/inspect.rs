//! What a harness reads from a running [`Stack`]: how many replicas run, each part's ports,
//! addresses, logs and pids, the options it runs under, and [`Stack::describe`], the JSON
//! `keyflight-stack up` writes. Read-only: nothing here changes the stack.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde_json::{Value, json};

use super::parts::{Envoy, Store};
use super::{ADMIN_TOKEN, Stack, StackOptions};
use crate::binaries::Binaries;
use crate::database::Database;
use crate::envoy_config::Ports;
use crate::pg::PgCluster;

impl Stack {
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
        self.store(index).admin
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

    /// What runs where, as JSON: ports, process ids, logs, configs, the filter's adapter
    /// (`wasm` or `native`), the database URL and the tokens (what `keyflight-stack up`
    /// writes to `stack.json`).
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
            .map(|store| {
                json!({
                    "port": store.port,
                    "admin": store.admin,
                    "pid": store.part.pid(),
                    "log": store.part.log(),
                })
            })
            .collect();
        let mut described = json!({
            "dir": self.dir,
            "adapter": if self.options.native { "native" } else { "wasm" },
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

    pub(super) fn envoy(&self, index: usize) -> &Envoy {
        self.envoys.get(index).unwrap_or_else(|| {
            panic!(
                "there is no Envoy {index}: the stack runs {}",
                self.envoys.len()
            )
        })
    }

    pub(super) fn store(&self, index: usize) -> &Store {
        self.stores.get(index).unwrap_or_else(|| {
            panic!(
                "there is no lease-store {index}: the stack runs {}",
                self.stores.len()
            )
        })
    }
}
