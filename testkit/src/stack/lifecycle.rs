//! A proxy's lifecycle as a platform drives it: a pod's termination (a graceful drain,
//! then `SIGTERM`), a hot restart, and the count of Wasm VMs that tells when a module push
//! has destroyed the old VM (`docs/envoy-facts.md#drain-and-shutdown`,
//! `docs/envoy-facts.md#hot-restart`,
//! `docs/envoy-facts.md#a-retired-root-context-keeps-working`).

use std::net::SocketAddr;
use std::time::Duration;

use super::{READY_TIMEOUT, Restart, Stack, network, restartable_envoy_command};
use crate::process::eventually;

/// How long a terminated Envoy may take to exit (it exits at once on `SIGTERM`).
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

impl Stack {
    /// Starts a graceful drain of every listener of Envoy `index`
    /// (`POST /drain_listeners?graceful`), as Istio's agent does for
    /// `terminationDrainDuration` before it sends `SIGTERM`: the listeners keep serving
    /// while connections are told to close, and the plugin and its outbox keep running.
    pub async fn drain_envoy(&self, index: usize) {
        let url = format!(
            "http://{}/drain_listeners?graceful",
            self.envoy_admin(index)
        );
        let answer = reqwest::Client::new().post(&url).send().await;
        match answer {
            Ok(answer) if answer.status().is_success() => {}
            other => panic!("POST {url}: {other:?}"),
        }
    }

    /// Sends Envoy `index` `SIGTERM` and waits until it has exited: the end of a pod.
    /// [`Stack::start_envoy`] starts it again.
    pub fn terminate_envoy(&mut self, index: usize) {
        tokio::task::block_in_place(|| self.envoys[index].part.terminate(EXIT_TIMEOUT));
    }

    /// Hot restarts Envoy `index`: starts the next epoch on the same config and base id,
    /// which takes the listen sockets over and tells the running process (the parent) to
    /// drain and, `parent_shutdown` later (whole seconds, at least one), to exit; waits
    /// until the new process answers its admin as live. A parent of an earlier hot restart
    /// is waited for first (Envoy admits one parent at a time).
    pub async fn hot_restart_envoy(&mut self, index: usize, parent_shutdown: Duration) {
        tokio::task::block_in_place(|| self.envoys[index].part.wait_parent_exit(EXIT_TIMEOUT));
        let envoy = &mut self.envoys[index];
        let base_id_text = std::fs::read_to_string(&envoy.base_id_file)
            .unwrap_or_else(|e| panic!("read {}: {e}", envoy.base_id_file.display()));
        let base_id: u32 = base_id_text.trim().parse().unwrap_or_else(|e| {
            panic!(
                "{} holds no base id ({base_id_text:?}): {e}",
                envoy.base_id_file.display()
            )
        });
        envoy.epoch += 1;
        let epoch = envoy.epoch;
        let command = restartable_envoy_command(
            &envoy.binaries,
            &envoy.config,
            &self.options.envoy_log_level,
            &self.options.filter_token(),
            Restart::Next {
                base_id,
                epoch,
                parent_shutdown,
            },
        );
        let command = network::inside(self.net.as_ref(), envoy.place, command);
        envoy.part.hot_restart(command);
        let admin = self.envoy_admin(index);
        eventually(
            &format!("Envoy {index}'s epoch {epoch} answers as live"),
            READY_TIMEOUT,
            || async move { live_epoch_at(admin).await == Some(epoch) },
        )
        .await;
    }

    /// Waits until the parent of Envoy `index`'s last hot restart has exited (it exits
    /// `parent_shutdown` after the restart); nothing when there is none.
    pub fn wait_envoy_parent_exit(&mut self, index: usize) {
        tokio::task::block_in_place(|| self.envoys[index].part.wait_parent_exit(EXIT_TIMEOUT));
    }

    /// The process id of the parent of Envoy `index`'s last hot restart, until
    /// [`Stack::wait_envoy_parent_exit`] (or a kill) reaped it.
    pub fn envoy_parent_pid(&self, index: usize) -> Option<u32> {
        self.envoy(index).part.parent_pid()
    }

    /// The restart epoch of Envoy `index`'s running process.
    pub fn envoy_epoch(&self, index: usize) -> u32 {
        self.envoy(index).epoch
    }

    /// Envoy `index`'s Wasm VM counts ([`wasm_vms_at`]).
    pub async fn wasm_vms(&self, index: usize) -> Option<WasmVms> {
        wasm_vms_at(self.envoy_admin(index)).await
    }

    fn envoy_admin(&self, index: usize) -> SocketAddr {
        let envoy = self.envoy(index);
        SocketAddr::new(envoy.place.ip, envoy.ports.admin)
    }
}

/// The restart epoch of the Envoy answering on `admin` once it is live
/// (`GET /server_info`); `None` while none answers live. The parent shuts its admin down
/// when the child starts, so what answers live with the child's epoch is the child.
async fn live_epoch_at(admin: SocketAddr) -> Option<u32> {
    let info: serde_json::Value = reqwest::get(format!("http://{admin}/server_info"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    if info["state"] != "LIVE" {
        return None;
    }
    u32::try_from(info["command_line_options"]["restart_epoch"].as_u64()?).ok()
}

/// An Envoy's Wasm VM counts, summed over its runtimes
/// (`wasm.envoy.wasm.runtime.<runtime>.{created,active}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmVms {
    /// VMs created since the process started (a push of another module adds its VMs).
    pub created: u64,
    /// VMs alive now (the old module's VMs leave it when they are destroyed).
    pub active: u64,
}

/// The Wasm VM counts of the Envoy whose admin listener is `admin`; `None` when it does not
/// answer. Free of the stack, so a watcher can poll it while the stack is busy.
pub async fn wasm_vms_at(admin: SocketAddr) -> Option<WasmVms> {
    let url = format!("http://{admin}/stats?filter=^wasm\\.envoy\\.wasm\\.runtime\\.");
    let text = reqwest::get(&url).await.ok()?.text().await.ok()?;
    let sum = |suffix: &str| -> u64 {
        text.lines()
            .filter_map(|line| line.split_once(": "))
            .filter(|(name, _)| name.ends_with(suffix))
            .filter_map(|(_, value)| value.trim().parse::<u64>().ok())
            .sum()
    };
    Some(WasmVms {
        created: sum(".created"),
        active: sum(".active"),
    })
}
