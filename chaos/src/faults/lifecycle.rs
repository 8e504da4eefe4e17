//! The proxy-lifecycle faults (`--faults envoy-drain,wasm-upgrade,rolling-upgrade,
//! envoy-hot-restart`): what a platform does to a running proxy, with claims in flight and
//! records in its outbox.
//!
//! | kind | inject | heal |
//! |---|---|---|
//! | envoy drain | `POST /drain_listeners?graceful` on Envoy N (a pod's termination drain), held 0.3–2.5 s while its listeners keep serving and its outbox keeps delivering | `SIGTERM` (its moment is the fault's `proxy_gone_ms`), wait for the exit (`proxy_exited_ms`), start it again on the same ports |
//! | wasm upgrade | Envoy 0's `.wasm` replaced by LDS: a rebuilt module (an upgrade), and by the next one the original again (a rollback); new VMs; the old listener drained for `--drain-time-s` (at once when it holds no connection), then its plugin retired and its VMs destroyed. A watcher polls Envoy's VM counts from just before the push | wait for the watcher: the moment Envoy had created new VMs and held no more than before the push, the old VMs destroyed, is `proxy_gone_ms` (seen while another fault holds too) |
//! | envoy hot restart | Envoy N's next restart epoch started on its base id (`Stack::hot_restart_envoy`), `--parent-shutdown-time-s 2`: the child takes the listen sockets, the parent drains (`--drain-time-s 1`) and keeps its outbox delivering | wait for the parent's exit: the moment it was seen exited is `proxy_gone_ms`, its epoch `parent_epoch` |
//! | rolling upgrade | Envoy 1 replaced as a rollout replaces a pod (`SIGTERM`, its moment `proxy_gone_ms`; the exit seen, `proxy_exited_ms`; a new process on the same ports) by one running the previous release's `.wasm` (`keyflight_testkit::previous_release`), and by the next one by this release's again: the mesh runs both releases in between | nothing |
//!
//! What each may cost is the guarantee's first at-least-once row: Envoy exits at once on
//! `SIGTERM`, a module push destroys the retired VM with its outbox, and a hot restart's
//! parent exits with its own (`docs/envoy-facts.md#drain-and-shutdown`,
//! `docs/envoy-facts.md#hot-restart`,
//! `docs/envoy-facts.md#a-retired-root-context-keeps-working`); the judge excuses a re-run
//! only with the evidence of that very loss (`checker/judgement.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keyflight_testkit::previous_release::previous_release;
use keyflight_testkit::stack::{Stack, WasmVms, wasm_vms_at};
use tokio::task::JoinHandle;

use crate::history::{Fault, FaultKind, Ms};
use crate::workload::Clock;

/// How long a module push may take to replace the VMs: Envoy compiles the new module before
/// it accepts the push, and the old listener drains for `--drain-time-s` after it; a loaded
/// machine stretches both.
const VM_GONE_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the VM count is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// How long a hot restart's parent drains before the child tells it to exit: past the
/// listener drain (`--drain-time-s 1`), within the policy's lease.
const PARENT_SHUTDOWN: Duration = Duration::from_secs(2);

/// The label of the rebuilt module an upgrade pushes.
const UPGRADE_LABEL: &str = "upgrade";

/// What an injected lifecycle fault needs at its heal.
#[derive(Default)]
pub struct Pending {
    /// A module push's watcher: when the old VMs were seen gone.
    old_vms_gone: Option<JoinHandle<Option<Ms>>>,
    /// A rolling upgrade's `SIGTERM`.
    terminated_ms: Option<Ms>,
    /// A rolling upgrade's old process seen exited, before its replacement started.
    exited_ms: Option<Ms>,
    /// A rolling upgrade's result: the Envoy runs the previous release now.
    previous_release: Option<bool>,
    /// A hot restart's parent: its restart epoch.
    parent_epoch: Option<u32>,
}

/// Starts the fault: a graceful drain, a module push, a pod replaced by another release,
/// or a hot restart.
pub async fn inject(stack: &mut Stack, kind: FaultKind, target: usize, clock: Clock) -> Pending {
    match kind {
        FaultKind::EnvoyDrain => {
            stack.drain_envoy(target).await;
            Pending::default()
        }
        FaultKind::EnvoyHotRestart => {
            let parent_epoch = Some(stack.envoy_epoch(target));
            stack.hot_restart_envoy(target, PARENT_SHUTDOWN).await;
            Pending {
                parent_epoch,
                ..Pending::default()
            }
        }
        FaultKind::RollingUpgrade => {
            let to_previous = stack.envoy_binaries(target).wasm == stack.binaries().wasm;
            let binaries = match to_previous {
                // Built before the run started (`main.rs`): here it is read from its cache.
                true => tokio::task::block_in_place(previous_release),
                false => stack.binaries().clone(),
            };
            let terminated_ms = Some(clock.now_ms());
            stack.terminate_envoy(target);
            let exited_ms = Some(clock.now_ms());
            stack.replace_envoy(target, binaries).await;
            Pending {
                terminated_ms,
                exited_ms,
                previous_release: Some(to_previous),
                ..Pending::default()
            }
        }
        FaultKind::WasmUpgrade => {
            let admin = SocketAddr::new(stack.envoy_ip(target), stack.envoy_ports(target).admin);
            let current = stack.envoy_binaries(target).wasm.clone();
            let module = match current == stack.binaries().wasm {
                true => stack.rebuilt_wasm(UPGRADE_LABEL),
                false => stack.binaries().wasm.clone(),
            };
            // The counts just before the push: the watcher compares with them.
            let watcher = wasm_vms_at(admin)
                .await
                .map(|before| tokio::spawn(old_vms_gone(admin, before, clock)));
            stack.upgrade_wasm(target, &module).await;
            Pending {
                old_vms_gone: watcher,
                ..Pending::default()
            }
        }
        other => panic!("{other:?} is not a proxy-lifecycle fault"),
    }
}

/// Ends the fault and records on `fault` when the old process or VM was gone (when that
/// was seen), for a rolling upgrade which release the Envoy runs now, and for a hot restart
/// which epoch the parent was.
pub async fn heal(stack: &mut Stack, fault: &mut Fault, pending: Pending, clock: Clock) {
    fault.proxy_gone_ms = match fault.kind {
        FaultKind::EnvoyDrain => {
            let gone = clock.now_ms();
            stack.terminate_envoy(fault.target);
            fault.proxy_exited_ms = Some(clock.now_ms());
            stack.start_envoy(fault.target).await;
            Some(gone)
        }
        FaultKind::WasmUpgrade => match pending.old_vms_gone {
            Some(watcher) => watcher.await.ok().flatten(),
            None => None,
        },
        FaultKind::RollingUpgrade => {
            fault.proxy_exited_ms = pending.exited_ms;
            pending.terminated_ms
        }
        FaultKind::EnvoyHotRestart => {
            stack.wait_envoy_parent_exit(fault.target);
            Some(clock.now_ms())
        }
        _ => None,
    };
    fault.previous_release = pending.previous_release;
    fault.parent_epoch = pending.parent_epoch;
}

/// Waits until the Envoy at `admin`, whose VM counts were `before` just before a push, has
/// created the new VMs and destroyed the old ones: more VMs created than before, no more
/// alive. With no connection to drain both happen within milliseconds of Envoy accepting
/// the push, so the counter of created VMs, not a rise of the live ones, shows the new VMs
/// came (`docs/envoy-facts.md#a-retired-root-context-keeps-working`). Returns when that is
/// seen (at most [`POLL`] after it happened), or `None` past [`VM_GONE_TIMEOUT`].
async fn old_vms_gone(admin: SocketAddr, before: WasmVms, clock: Clock) -> Option<Ms> {
    let deadline = Instant::now() + VM_GONE_TIMEOUT;
    while Instant::now() < deadline {
        let vms = wasm_vms_at(admin).await;
        if vms.is_some_and(|vms| vms.created > before.created && vms.active <= before.active) {
            return Some(clock.now_ms());
        }
        tokio::time::sleep(POLL).await;
    }
    None
}
