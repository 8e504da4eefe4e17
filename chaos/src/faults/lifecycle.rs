//! The proxy-lifecycle faults (`--faults envoy-drain,wasm-upgrade`): what a platform does
//! to a running proxy, with claims in flight and records in its outbox.
//!
//! | kind | inject | heal |
//! |---|---|---|
//! | envoy drain | `POST /drain_listeners?graceful` on Envoy N (a pod's termination drain), held 0.3–2.5 s while its listeners keep serving and its outbox keeps delivering | `SIGTERM` (its moment is the fault's `proxy_gone_ms`), wait for the exit, start it again on the same ports |
//! | wasm upgrade | Envoy 0's `.wasm` replaced by LDS: a rebuilt module (an upgrade), and by the next one the original again (a rollback); a new VM, the old listener drained for `--drain-time-s` and its plugin retired | wait until Envoy holds no more VMs than before the push: the old VMs are destroyed (that moment is `proxy_gone_ms`) |
//!
//! What each may cost is the guarantee's first at-least-once row: Envoy exits at once on
//! `SIGTERM` and a module push destroys the retired VM with its outbox
//! (`docs/envoy-facts.md#drain-and-shutdown`,
//! `docs/envoy-facts.md#a-retired-root-context-keeps-working`); the judge excuses a re-run
//! only with the evidence of that very loss (`checker/judgement.rs`).

use std::time::{Duration, Instant};

use keyflight_testkit::stack::Stack;

use crate::history::{Fault, FaultKind, Ms};
use crate::workload::Clock;

/// How long the old VMs may take to go after a module push: the old listener's drain
/// (`--drain-time-s 1`) and its removal, with room for a loaded machine.
const VM_GONE_TIMEOUT: Duration = Duration::from_secs(15);

/// How often the VM count is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// The label of the rebuilt module an upgrade pushes.
const UPGRADE_LABEL: &str = "upgrade";

/// What an injected lifecycle fault needs at its heal.
pub struct Pending {
    /// Envoy's VM count before a module push.
    vms_before: Option<u64>,
}

/// Starts the fault: a graceful drain, or a module push.
pub async fn inject(stack: &mut Stack, kind: FaultKind, target: usize) -> Pending {
    match kind {
        FaultKind::EnvoyDrain => {
            stack.drain_envoy(target).await;
            Pending { vms_before: None }
        }
        FaultKind::WasmUpgrade => {
            let vms_before = stack.wasm_vms(target).await;
            let current = stack.envoy_binaries(target).wasm.clone();
            let module = match current == stack.binaries().wasm {
                true => stack.rebuilt_wasm(UPGRADE_LABEL),
                false => stack.binaries().wasm.clone(),
            };
            stack.upgrade_wasm(target, &module).await;
            Pending { vms_before }
        }
        other => panic!("{other:?} is not a proxy-lifecycle fault"),
    }
}

/// Ends the fault; returns when the old process or VM was gone, when that was seen.
pub async fn heal(stack: &mut Stack, fault: &Fault, pending: Pending, clock: Clock) -> Option<Ms> {
    match fault.kind {
        FaultKind::EnvoyDrain => {
            let gone = clock.now_ms();
            stack.terminate_envoy(fault.target);
            stack.start_envoy(fault.target).await;
            Some(gone)
        }
        FaultKind::WasmUpgrade => {
            old_vms_gone(stack, fault.target, pending.vms_before?, clock).await
        }
        _ => None,
    }
}

/// Waits until Envoy `target` holds no more VMs than `before` the push: the moment it is
/// seen (at most [`POLL`] after the old VMs went), or `None` past [`VM_GONE_TIMEOUT`].
async fn old_vms_gone(stack: &Stack, target: usize, before: u64, clock: Clock) -> Option<Ms> {
    let deadline = Instant::now() + VM_GONE_TIMEOUT;
    while Instant::now() < deadline {
        if stack
            .wasm_vms(target)
            .await
            .is_some_and(|vms| vms <= before)
        {
            return Some(clock.now_ms());
        }
        tokio::time::sleep(POLL).await;
    }
    None
}
