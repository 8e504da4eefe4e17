//! Applies the plan's fault schedule to the stack and records when each fault began and
//! when the part was healthy again. Faults come one after another, except a step drawn to
//! overlap the next ([`FaultStep::overlaps_next`]): then both are injected, held, and
//! healed (the later first, but the database before anything), so two parts are broken at
//! once.
//!
//! | kind | inject | heal |
//! |---|---|---|
//! | store kill | SIGKILL to a lease-store | start it again on its port, wait for `/readyz` |
//! | store freeze | SIGSTOP to a lease-store (longer than the filter's call timeout) | SIGCONT |
//! | Postgres crash | `pg_ctl stop -m immediate` (replicated: SIGKILL to the primary's postmaster) | `pg_ctl start` (replicated: its Patroni agent restarts it), wait for every lease-store's `/readyz` |
//! | Postgres freeze (single or partitioned) | SIGSTOP to every Postgres process (a partition's) | SIGCONT, wait for every lease-store's `/readyz` |
//! | Envoy kill | SIGKILL to an Envoy | start it again on its ports, wait for `/ready` |
//! | primary node death (replicated only) | SIGKILL to the primary's Patroni agent and postmaster; Patroni promotes the synchronous standby (the failover window is recorded) | start the dead node's agent: it rejoins as the synchronous standby |
//! | plugin push | a new plugin configuration for Envoy 0 by LDS (`plugin_push.rs`), returns once Envoy accepted it | nothing: the old plugin instance drains on its own |
//! | proxy partition, store db partition, one way loss, slow link | the links of one namespace cut, one way or slowed (`faults/network.rs`) | the link restored |
//! | envoy drain, wasm upgrade, rolling upgrade | a graceful drain, a module push, Envoy 1 replaced by another release (`faults/lifecycle.rs`) | `SIGTERM` and a restart; the old VMs seen destroyed; nothing |
//! | operator erase, operator resolve, operator resolve failed | the newest `completed`, `pending` or `unknown` record (in turn) erased, or the newest `unknown` one resolved as completed or as failed, through a lease-store's admin API (`faults/operator.rs`; the scope, the state and the answer are recorded) | nothing |
//!
//! No fault starts after the run's duration; the one in progress then is healed as usual.

mod lifecycle;
mod network;
mod operator;
mod plugin_push;

use std::time::Duration;

use keyflight_testkit::net::CutId;
use keyflight_testkit::process::Signal;
use keyflight_testkit::stack::{Crash, Stack};

use crate::history::{Fault, FaultKind, Ms};
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
    let deadline = Ms::try_from(duration_ms).unwrap_or(Ms::MAX);
    let mut steps = steps.iter().enumerate();
    while let Some((position, step)) = steps.next() {
        tokio::time::sleep(Duration::from_millis(step.gap_ms)).await;
        if clock.now_ms() >= deadline {
            break;
        }
        let first = inject(stack, step, position, clock).await;
        let second = match step.overlaps_next.then(|| steps.next()).flatten() {
            Some((position, next)) => {
                let gap = next.gap_ms.min(step.hold_ms / 2);
                tokio::time::sleep(Duration::from_millis(gap)).await;
                let second = inject(stack, next, position, clock).await;
                let held = Duration::from_millis(step.hold_ms.saturating_sub(gap));
                tokio::time::sleep(held.max(Duration::from_millis(next.hold_ms))).await;
                Some(second)
            }
            None => {
                tokio::time::sleep(Duration::from_millis(step.hold_ms)).await;
                None
            }
        };
        let mut healed = Vec::new();
        for injected in heal_order(first, second) {
            healed.push(heal(stack, injected, clock).await);
        }
        healed.sort_by_key(|fault| fault.start_ms);
        for mut fault in healed {
            fault.id = faults.len();
            faults.push(fault);
        }
    }
    faults
}

/// The order two faults at once are healed in: the later one first, except that a
/// lease-store freeze is always resumed first — a Postgres crash's or freeze's heal waits
/// until every lease-store answers `/readyz`, which a frozen one never does — and the
/// database is healed before anything else: a killed lease-store is ready again only once
/// Postgres answers.
fn heal_order(first: Injected, second: Option<Injected>) -> Vec<Injected> {
    let mut order: Vec<Injected> = second.into_iter().chain([first]).collect();
    order.sort_by_key(|injected| {
        let kind = injected.fault.kind;
        (kind != FaultKind::StoreFreeze, !kind.breaks_the_database())
    });
    order
}

/// A fault injected and not healed yet.
struct Injected {
    fault: Fault,
    crash: Option<Crash>,
    old_primary: Option<usize>,
    /// A link fault's cut, and when its rules were in place.
    cut: Option<(CutId, Ms)>,
    lifecycle: Option<lifecycle::Pending>,
}

/// Injects `step`, the plan's step at `position`.
async fn inject(stack: &mut Stack, step: &FaultStep, position: usize, clock: Clock) -> Injected {
    let mut injected = Injected {
        fault: Fault {
            id: 0,
            kind: step.kind,
            target: step.target,
            start_ms: clock.now_ms(),
            end_ms: 0,
            failover_window_ms: None,
            proxy_gone_ms: None,
            proxy_exited_ms: None,
            previous_release: None,
            parent_epoch: None,
            operator: None,
            in_place_ms: None,
        },
        crash: None,
        old_primary: None,
        cut: None,
        lifecycle: None,
    };
    match step.kind {
        FaultKind::StoreKill => stack.kill_store(step.target),
        FaultKind::StoreFreeze => stack.signal_store(step.target, Signal::Stop),
        FaultKind::PostgresFreeze => stack.freeze_postgres(step.target),
        FaultKind::PostgresCrash => {
            // On a partitioned database, the partition the plan drew as the target.
            injected.crash = Some(match stack.database().partitions().len() {
                0 => stack.crash_postgres().await,
                _ => stack.crash_partition(step.target),
            });
        }
        FaultKind::PrimaryNodeDeath => {
            if let Some((old_primary, window)) = stack.fail_primary_node().await {
                injected.fault.failover_window_ms = u64::try_from(window.as_millis()).ok();
                injected.old_primary = Some(old_primary);
            }
        }
        FaultKind::EnvoyKill => {
            stack.kill_envoy(step.target);
            injected.fault.proxy_exited_ms = Some(clock.now_ms());
        }
        FaultKind::PluginPush => plugin_push::push(stack).await,
        FaultKind::ProxyPartition
        | FaultKind::StoreDbPartition
        | FaultKind::OneWayLoss
        | FaultKind::SlowLink => {
            let cut = network::cut(stack, step);
            injected.cut = Some((cut, clock.now_ms()));
        }
        FaultKind::EnvoyDrain
        | FaultKind::WasmUpgrade
        | FaultKind::RollingUpgrade
        | FaultKind::EnvoyHotRestart => {
            injected.lifecycle =
                Some(lifecycle::inject(stack, step.kind, step.target, clock).await);
        }
        FaultKind::OperatorErase
        | FaultKind::OperatorResolve
        | FaultKind::OperatorResolveFailed => {
            let nth = injected.fault.start_ms;
            injected.fault.operator =
                Some(operator::act(stack, step.kind, position, step.target, nth).await);
        }
    }
    injected
}

async fn heal(stack: &mut Stack, injected: Injected, clock: Clock) -> Fault {
    let Injected {
        mut fault,
        crash,
        old_primary,
        cut,
        lifecycle,
    } = injected;
    match fault.kind {
        FaultKind::StoreKill => stack.start_store(fault.target).await,
        FaultKind::StoreFreeze => stack.signal_store(fault.target, Signal::Cont),
        FaultKind::PostgresFreeze => stack.thaw_postgres(fault.target).await,
        FaultKind::PostgresCrash => {
            if let Some(crash) = crash {
                stack.recover_postgres(crash).await;
            }
        }
        FaultKind::PrimaryNodeDeath => {
            if let Some(node) = old_primary {
                stack.rejoin_node(node).await;
            }
        }
        FaultKind::EnvoyKill => stack.start_envoy(fault.target).await,
        FaultKind::PluginPush
        | FaultKind::OperatorErase
        | FaultKind::OperatorResolve
        | FaultKind::OperatorResolveFailed => {}
        FaultKind::ProxyPartition
        | FaultKind::StoreDbPartition
        | FaultKind::OneWayLoss
        | FaultKind::SlowLink => {
            if let Some((cut, in_place)) = cut {
                fault.in_place_ms = Some((in_place, clock.now_ms()));
                stack.heal(cut);
            }
        }
        FaultKind::EnvoyDrain
        | FaultKind::WasmUpgrade
        | FaultKind::RollingUpgrade
        | FaultKind::EnvoyHotRestart => {
            if let Some(pending) = lifecycle {
                lifecycle::heal(stack, &mut fault, pending, clock).await;
            }
        }
    }
    fault.end_ms = clock.now_ms();
    fault
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injected(kind: FaultKind) -> Injected {
        Injected {
            fault: Fault {
                id: 0,
                kind,
                target: 0,
                start_ms: 0,
                end_ms: 0,
                failover_window_ms: None,
                proxy_gone_ms: None,
                proxy_exited_ms: None,
                previous_release: None,
                parent_epoch: None,
                operator: None,
                in_place_ms: None,
            },
            crash: None,
            old_primary: None,
            cut: None,
            lifecycle: None,
        }
    }

    fn kinds(order: &[Injected]) -> Vec<FaultKind> {
        order.iter().map(|injected| injected.fault.kind).collect()
    }

    /// Seen in `make chaos DURATION=3m SEED=3666368771`: a freeze overlapped by a Postgres
    /// crash, the crash healed first, and its wait for every store's `/readyz` timed out on
    /// the frozen one.
    #[test]
    fn a_frozen_store_is_resumed_before_a_postgres_crash_is_healed() {
        let order = heal_order(
            injected(FaultKind::StoreFreeze),
            Some(injected(FaultKind::PostgresCrash)),
        );
        assert_eq!(
            kinds(&order),
            [FaultKind::StoreFreeze, FaultKind::PostgresCrash]
        );
        // Otherwise the later fault first, as before.
        let order = heal_order(
            injected(FaultKind::EnvoyKill),
            Some(injected(FaultKind::PostgresCrash)),
        );
        assert_eq!(
            kinds(&order),
            [FaultKind::PostgresCrash, FaultKind::EnvoyKill]
        );
    }

    /// Seen with seed 61: a lease-store killed while Postgres crashed, the store healed
    /// first (the later fault), and its wait for `/readyz` outlasted the database's outage.
    #[test]
    fn the_database_is_healed_before_a_killed_store() {
        let order = heal_order(
            injected(FaultKind::PostgresCrash),
            Some(injected(FaultKind::StoreKill)),
        );
        assert_eq!(
            kinds(&order),
            [FaultKind::PostgresCrash, FaultKind::StoreKill]
        );
    }
}
