//! The faults a scenario injects, by replica number: stopping, killing, signalling and
//! restarting the stack's parts, and reconfiguring the plugin. Each forwards to the
//! launcher ([`keyflight_testkit::stack::Stack`]), which is where the parts live.

use keyflight_testkit::ha::HaCluster;
use keyflight_testkit::process::Signal;
use serde_json::Value;

use super::Stack;

impl Stack {
    /// Kills lease-store replica 0 (`SIGKILL`) and waits until it is gone.
    pub fn stop_lease_store(&mut self) {
        self.parts_mut().kill_store(0);
    }

    /// Pushes a new plugin configuration to replica 0 (a [`super::StackOptions::reconfigurable`]
    /// stack), as a control plane does; returns once Envoy has accepted the update.
    pub async fn reconfigure(&mut self, edit: impl FnOnce(&mut Value)) {
        self.parts_mut().reconfigure(edit).await;
    }

    /// Starts lease-store replica 0 again on its port (killing it first if it still runs)
    /// and waits until it is ready: a pod restart.
    pub async fn restart_lease_store(&mut self) {
        self.parts_mut().start_store(0).await;
    }

    /// Sends `signal` to lease-store replica `replica` (`Stop` freezes it: a hung store).
    pub fn signal_lease_store(&self, replica: usize, signal: Signal) {
        self.parts().signal_store(replica, signal);
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
        self.parts().signal_envoy(replica, signal);
    }

    /// Kills the upstream with `SIGKILL`: requests it holds are cut off mid-answer (see
    /// [`Stack::restart_upstream`]).
    pub fn kill_upstream(&self) {
        self.parts().signal_upstream(Signal::Kill);
    }

    /// Starts a fresh upstream on the same port (its counters start at zero) and waits
    /// until it answers.
    pub async fn restart_upstream(&mut self) {
        self.parts_mut().restart_upstream().await;
    }

    /// Stops Postgres at once, as a crash would (the lease-store keeps running): every
    /// partition of a partitioned stack.
    pub fn stop_postgres(&self) {
        for node in self.parts().database().record_nodes() {
            node.stop();
        }
    }

    /// Starts Postgres again after [`Stack::stop_postgres`] (crash recovery runs).
    pub fn restart_postgres(&self) {
        for node in self.parts().database().record_nodes() {
            node.restart();
        }
    }

    /// The replicated database of a [`super::StackOptions::replicated_postgres`] stack, for
    /// its faults (kill the primary's node, …). Panics on a single-node stack.
    pub fn ha(&self) -> &HaCluster {
        self.parts().ha()
    }
}
