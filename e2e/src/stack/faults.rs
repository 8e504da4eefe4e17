//! The faults a test injects into a running stack: stopping, killing,
//! signalling and restarting its parts, and reconfiguring the plugin.

use keyflight_testkit::ha::HaCluster;
use keyflight_testkit::process::{Signal, wait_http_ok};
use serde_json::Value;

use super::commands::{lds_path_of, render_for, spawn_lease_store, spawn_upstream};
use super::{Database, READY_TIMEOUT, Stack};
use crate::lds;

impl Stack {
    /// Kills the lease-store (`SIGKILL`) and waits until it is gone.
    pub fn stop_lease_store(&mut self) {
        if let Some(mut store) = self.lease_store.take() {
            store.kill();
        }
    }

    /// Pushes a new plugin configuration to replica 0 (a [`StackOptions::reconfigurable`]
    /// stack), as a control plane does: Envoy builds a new listener with it and drains the
    /// old one. Returns once Envoy has accepted the update.
    pub async fn reconfigure(&mut self, edit: impl FnOnce(&mut Value)) {
        assert!(
            self.options.listener_from_file,
            "reconfigure needs StackOptions::reconfigurable"
        );
        edit(&mut self.options.plugin);
        let rendered = render_for(&self.binaries, &self.ports, &self.options);
        let lds_path = lds_path_of(&self.config_path);
        let split = lds::split(&rendered, &lds_path).unwrap_or_else(|e| panic!("{e}"));
        let updates_before = self.envoy_stat("listener_manager.lds.update_success").await;
        lds::write_atomically(&lds_path, &split.listeners)
            .unwrap_or_else(|e| panic!("write {}: {e}", lds_path.display()));
        self.eventually("Envoy accepted the new listener", || async {
            self.envoy_stat("listener_manager.lds.update_success").await > updates_before
        })
        .await;
    }

    /// Starts lease-store replica 0 again on its port (after [`Stack::stop_lease_store`],
    /// or killing it at once if it still runs) and waits until it is ready: a pod restart.
    pub async fn restart_lease_store(&mut self) {
        self.stop_lease_store();
        let mut store = spawn_lease_store(
            &self.binaries,
            &self.postgres,
            self.ports.lease_store(),
            &self.options,
            false,
        );
        let ready = format!("http://127.0.0.1:{}/readyz", self.ports.lease_store());
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut store)).await;
        self.lease_store_log = store.log_path().to_path_buf();
        self.lease_store = Some(store);
    }

    /// Sends `signal` to lease-store replica `replica` (`Stop` freezes it: a hung store).
    pub fn signal_lease_store(&self, replica: usize, signal: Signal) {
        match (replica, &self.lease_store, &self.second) {
            (0, Some(store), _) => store.signal(signal),
            (1, _, Some(second)) => second.lease_store.signal(signal),
            _ => panic!("lease-store replica {replica} is not running"),
        }
    }

    /// Kills Envoy replica `replica` with `SIGKILL`: a crashed proxy, whose streams end
    /// unfinished. Takes `&self` so requests in flight through the stack can be cut off;
    /// the dead process is reaped when the stack drops.
    pub fn kill_envoy(&self, replica: usize) {
        self.signal_envoy(replica, Signal::Kill);
    }

    /// Sends `signal` to Envoy replica `replica` (`Stop` freezes it: a stalled proxy that
    /// neither renews its leases nor answers, until `Cont`).
    pub fn signal_envoy(&self, replica: usize, signal: Signal) {
        match (replica, &self.second) {
            (0, _) => self.envoy.signal(signal),
            (1, Some(second)) => second.envoy.signal(signal),
            _ => panic!("there is no Envoy replica {replica}"),
        }
    }

    /// Kills the upstream with `SIGKILL`: requests it holds are cut off mid-answer (see
    /// [`Stack::restart_upstream`]).
    pub fn kill_upstream(&self) {
        self.upstream.signal(Signal::Kill);
    }

    /// Starts a fresh upstream on the same port (its counters start at zero) and waits
    /// until it answers.
    pub async fn restart_upstream(&mut self) {
        self.upstream.kill();
        self.upstream = spawn_upstream(&self.binaries, self.ports.upstream);
        let ready = format!("http://127.0.0.1:{}/stats", self.ports.upstream);
        wait_http_ok(&ready, READY_TIMEOUT, Some(&mut self.upstream)).await;
    }

    /// Stops Postgres at once, as a crash would (the lease-store keeps running).
    pub fn stop_postgres(&self) {
        self.postgres.single().stop();
    }

    /// Starts Postgres again after [`Stack::stop_postgres`] (crash recovery runs).
    pub fn restart_postgres(&self) {
        self.postgres.single().restart();
    }

    /// The replicated database of a [`StackOptions::replicated_postgres`] stack, for its
    /// faults (kill the primary's node, …). Panics on a single-node stack.
    pub fn ha(&self) -> &HaCluster {
        match &self.postgres {
            Database::Replicated(cluster) => cluster,
            Database::Single(_) => {
                panic!("not a replicated stack: use StackOptions::replicated_postgres")
            }
        }
    }
}
