//! Applies the plan's fault schedule to the stack, one fault at a time, and records when each
//! began and when the part was healthy again.
//!
//! | kind | inject | heal |
//! |---|---|---|
//! | store kill | SIGKILL to a lease-store | start it again on its port, wait for `/readyz` |
//! | store freeze | SIGSTOP to a lease-store (longer than the filter's call timeout) | SIGCONT |
//! | Postgres crash | `pg_ctl stop -m immediate` (replicated: SIGKILL to the primary's postmaster) | `pg_ctl start` (replicated: its Patroni agent restarts it), wait for every lease-store's `/readyz` |
//! | Envoy kill | SIGKILL to an Envoy | start it again on its ports, wait for `/ready` |
//! | primary node death (replicated only) | SIGKILL to the primary's Patroni agent and postmaster; Patroni promotes the synchronous standby (the failover window is recorded) | start the dead node's agent: it rejoins as the synchronous standby |
//! | proxy partition, store db partition, one way loss, slow link | the links of one namespace cut, one way or slowed (`faults/network.rs`) | the link restored |
//!
//! No fault starts after the run's duration; the one in progress then is healed as usual.

mod network;

use std::time::Duration;

use keyflight_testkit::process::Signal;
use keyflight_testkit::stack::Stack;

use crate::history::{Fault, FaultKind};
use crate::plan::FaultStep;
use crate::workload::Clock;

/// Runs `steps` until `duration_ms`; returns the faults injected.
pub async fn run(
    stack: &mut Stack,
    steps: &[FaultStep],
    clock: Clock,
    duration_ms: u64,
) -> Vec<Fault> {
    let mut faults = Vec::new();
    let deadline = i64::try_from(duration_ms).unwrap_or(i64::MAX);
    for step in steps {
        tokio::time::sleep(Duration::from_millis(step.gap_ms)).await;
        if clock.now_ms() >= deadline {
            break;
        }
        let hold = Duration::from_millis(step.hold_ms);
        let start_ms = clock.now_ms();
        let mut failover_window_ms = None;
        match step.kind {
            FaultKind::StoreKill => {
                stack.kill_store(step.target);
                tokio::time::sleep(hold).await;
                stack.start_store(step.target).await;
            }
            FaultKind::StoreFreeze => {
                stack.signal_store(step.target, Signal::Stop);
                tokio::time::sleep(hold).await;
                stack.signal_store(step.target, Signal::Cont);
            }
            FaultKind::PostgresCrash => {
                let crash = stack.crash_postgres().await;
                tokio::time::sleep(hold).await;
                stack.recover_postgres(crash).await;
            }
            FaultKind::PrimaryNodeDeath => {
                if let Some((old_primary, window)) = stack.fail_primary_node().await {
                    failover_window_ms = u64::try_from(window.as_millis()).ok();
                    tokio::time::sleep(hold).await;
                    stack.rejoin_node(old_primary).await;
                }
            }
            FaultKind::EnvoyKill => {
                stack.kill_envoy(step.target);
                tokio::time::sleep(hold).await;
                stack.start_envoy(step.target).await;
            }
            FaultKind::ProxyPartition
            | FaultKind::StoreDbPartition
            | FaultKind::OneWayLoss
            | FaultKind::SlowLink => network::inject(stack, step).await,
        }
        faults.push(Fault {
            id: faults.len(),
            kind: step.kind,
            target: step.target,
            start_ms,
            end_ms: clock.now_ms(),
            failover_window_ms,
        });
    }
    faults
}
