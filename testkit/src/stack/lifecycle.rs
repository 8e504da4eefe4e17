//! A proxy's lifecycle as a platform drives it: a pod's termination (a graceful drain,
//! then `SIGTERM`) and the count of Wasm VMs that tells when a module push has destroyed
//! the old VM (`docs/envoy-facts.md#drain-and-shutdown`,
//! `docs/envoy-facts.md#a-retired-root-context-keeps-working`).

use std::net::SocketAddr;
use std::time::Duration;

use super::Stack;

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

    /// Envoy `index`'s Wasm VM counts ([`wasm_vms_at`]).
    pub async fn wasm_vms(&self, index: usize) -> Option<WasmVms> {
        wasm_vms_at(self.envoy_admin(index)).await
    }

    fn envoy_admin(&self, index: usize) -> SocketAddr {
        let envoy = self.envoy(index);
        SocketAddr::new(envoy.place.ip, envoy.ports.admin)
    }
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
