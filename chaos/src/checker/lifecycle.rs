//! The proxy-lifecycle faults in the first at-least-once row of the guarantee table
//! (`docs/guarantee.md#where-it-is-at-least-once`): a drained Envoy ends at once on
//! `SIGTERM`, and a push of another Wasm module destroys the retired VM, each with its
//! outbox (`docs/envoy-facts.md#drain-and-shutdown`,
//! `docs/envoy-facts.md#a-retired-root-context-keeps-working`). `rerun.rs` has already
//! shown what every row needs (same body and fingerprint, every claim in between a
//! takeover, no settle of the earlier fence landed before the takeover).
//!
//! - **A process that ended** ([`process_ended`]): an Envoy kill, a drain or a rolling
//!   upgrade ends it when the process was seen exited after its `SIGKILL` or `SIGTERM`
//!   (`proxy_exited_ms`; in a history that lacks it, the kill's start or the `SIGTERM`,
//!   `proxy_gone_ms`). Until then the process runs on, and a claim it sent may be stamped
//!   by the store after the fault began. The dead-proxy row then holds it to the kill's
//!   conditions: the claim won before that moment, the moment before the takeover and any
//!   landed settle, the hand-off logged if the caller had its answer.
//! - **A VM a module push destroyed** ([`vm_retired`]): the Envoy that forwarded the
//!   earlier execution logged, on retiring a root context, that fence's settle call still
//!   in its outbox (`evidence=retired`); a `wasm_upgrade` of that Envoy then saw the old
//!   VMs gone (`proxy_gone_ms`) — the first such push at or after the retirement, the one
//!   that destroyed the VM the retired context lived in — before the takeover and any
//!   landed settle. A retirement with no module push after it, or one whose old VMs went
//!   only after the takeover (a configuration push keeps the VM, whose retired context
//!   keeps delivering), excuses nothing by itself, and leaves the other rows to be tried.
//! - **A hot restart's parent that exited** ([`parent_exited`]): the Envoy that forwarded
//!   the earlier execution was hot restarted, and its parent process — the epoch the fault
//!   recorded — logged that fence's settle call still in its outbox (`evidence=retired`,
//!   which it logs as it exits, `--parent-shutdown-time-s` after the child started), and
//!   was seen exited (`proxy_gone_ms`) before the takeover and any landed settle. Until it
//!   exits the parent keeps delivering (`docs/envoy-facts.md#hot-restart`), so the hot
//!   restart's start excuses nothing, nor does a retirement logged by another epoch.
//! - **A rolling upgrade** ends the replaced process at its `SIGTERM` (as a drain), and
//!   leaves the Envoy on the previous release until the next one: a status that release
//!   forgets and this one records ([`PREVIOUS_RELEASE_ALSO_FORGETS`]) answered through it
//!   was forgotten, so a retry ran again ([`previous_release_forgot`]), and that answer was
//!   never recorded, so it does not replay ([`answered_by_the_previous_release`]).

use std::collections::{BTreeSet, HashMap};

use super::evidence::ClaimWon;
use super::partition::Earlier;
use super::rerun::answered_by;
use super::verdict::{Rerun, RerunVerdict, Row, SETTLE_LOG_SLACK_MS};
use crate::history::{Attempt, Execution, Fault, FaultKind, History, Ms};

/// When `fault` ended the Envoy process it hit, for the faults that end one (an Envoy
/// kill, a drain, a rolling upgrade): when the process was seen exited (no later instance
/// of that Envoy existed before), else at the kill's start or the `SIGTERM`. `None` for
/// any other fault, and for a drain or upgrade whose `SIGTERM` was not recorded.
pub fn process_ended(fault: &Fault) -> Option<Ms> {
    let signalled = match fault.kind {
        FaultKind::EnvoyKill => fault.start_ms,
        FaultKind::EnvoyDrain | FaultKind::RollingUpgrade => fault.proxy_gone_ms?,
        _ => return None,
    };
    Some(
        fault
            .proxy_exited_ms
            .map_or(signalled, |exited| exited.max(signalled)),
    )
}

/// The row of a record destroyed with its retired VM: `Ok(None)` when Envoy `envoy` logged
/// no retirement of `claim`'s settle call, or when no module push destroyed that VM before
/// the takeover and any landed settle (a configuration push retires the root context but
/// keeps the VM, whose outbox goes on delivering: the retirement excuses nothing by itself,
/// and another row may still fit).
pub fn vm_retired(
    earlier: &Earlier<'_>,
    takeover: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Option<Row> {
    let before = earlier.deadline(takeover);
    let Earlier {
        execution: earlier,
        envoy,
        claim,
        ..
    } = *earlier;
    let retired = history
        .evidence
        .proxy_event(envoy, claim.fence, "retired")?;
    let (push, gone) = history
        .faults
        .iter()
        .filter(|fault| fault.kind == FaultKind::WasmUpgrade && fault.target == envoy)
        .filter_map(|fault| Some((fault, fault.proxy_gone_ms?)))
        .filter(|(_, gone)| retired.at_ms <= *gone && *gone < before)
        .min_by_key(|(_, gone)| *gone)?;
    Some(Row::VmRetired {
        fault: push.id,
        answer_delivered: answered_by(earlier, attempts_by_id, gone).is_some(),
    })
}

/// The row of a record lost with a hot restart's parent: `Ok(None)` when no parent of a
/// hot restart of Envoy `envoy` logged the retirement of `claim`'s settle call, `Err` when
/// one did but was not seen exited before the takeover and any landed settle.
pub fn parent_exited(
    earlier: &Earlier<'_>,
    takeover: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let before = earlier.deadline(takeover);
    let Earlier {
        execution: earlier,
        envoy,
        claim,
        landed,
    } = *earlier;
    let fence = claim.fence;
    let retired_by = |epoch: u32| {
        history
            .evidence
            .proxy_settles
            .iter()
            .filter(|s| s.envoy == envoy && s.fence == fence && s.event == "retired")
            .filter(move |s| s.epoch == epoch)
    };
    // The hot restart whose parent logged the retirement after the child started.
    let Some((restart, retired)) = history
        .faults
        .iter()
        .filter(|fault| fault.kind == FaultKind::EnvoyHotRestart && fault.target == envoy)
        .filter_map(|fault| {
            let retired = retired_by(fault.parent_epoch?)
                .filter(|s| s.at_ms >= fault.start_ms - SETTLE_LOG_SLACK_MS)
                .filter(|s| {
                    fault
                        .proxy_gone_ms
                        .is_none_or(|gone| s.at_ms <= gone + SETTLE_LOG_SLACK_MS)
                })
                .min_by_key(|s| s.at_ms)?;
            Some((fault, retired))
        })
        .min_by_key(|(_, retired)| retired.at_ms)
    else {
        return Ok(None);
    };
    let Some(gone) = restart.proxy_gone_ms else {
        return Err(format!(
            "envoy-{envoy}'s hot restart (fault {}) retired fence {fence}'s settle call at {} \
             ms, but its parent was never seen exited",
            restart.id, retired.at_ms
        ));
    };
    if gone >= before {
        return Err(format!(
            "envoy-{envoy}'s hot-restart parent exited at {gone} ms, not before the takeover \
             (fence {}) at {} ms{}",
            takeover.fence,
            takeover.at_ms,
            landed.map_or(String::new(), |at| format!(" or the settle at {at} ms"))
        ));
    }
    Ok(Some(Row::ParentExited {
        fault: restart.id,
        answer_delivered: answered_by(earlier, attempts_by_id, gone).is_some(),
    }))
}

/// The statuses the previous release (`testkit/src/previous_release.rs`) forgets and this
/// one records (`docs/guarantee.md#every-answer-after-which-a-retry-runs-again`).
pub const PREVIOUS_RELEASE_ALSO_FORGETS: [u16; 1] = [303];

/// The rolling upgrade (fault id) that had moved `earlier`'s Envoy to the previous release
/// when it ran `earlier`, if the upstream answered it a status that release forgets: the
/// last rolling upgrade of that Envoy whose replacement could run by then moved it there.
pub fn previous_release_forgot(history: &History, earlier: &Execution) -> Option<usize> {
    let status = earlier.answered?;
    let envoy = earlier.via?;
    if !PREVIOUS_RELEASE_ALSO_FORGETS.contains(&status) {
        return None;
    }
    let last = history
        .faults
        .iter()
        .filter(|fault| fault.kind == FaultKind::RollingUpgrade && fault.target == envoy)
        .filter(|fault| replacement_from(fault) <= earlier.at_ms)
        .max_by_key(|fault| replacement_from(fault))?;
    (last.previous_release == Some(true)).then_some(last.id)
}

/// The earliest moment a rolling upgrade's new process could forward a request: when the
/// old one was seen exited (it forwards on for a moment after its `SIGTERM`), or the
/// upgrade's start in a history that lacks the exit.
fn replacement_from(upgrade: &Fault) -> Ms {
    upgrade.proxy_exited_ms.unwrap_or(upgrade.start_ms)
}

/// The caller attempts whose answer came from an execution the previous release forgot.
pub fn answered_by_the_previous_release<'a>(
    reruns: &[Rerun],
    executions: &[&'a Execution],
) -> BTreeSet<&'a str> {
    reruns
        .iter()
        .filter(|rerun| {
            matches!(
                rerun.verdict,
                RerunVerdict::Excused {
                    row: Row::ForgottenByThePreviousRelease { .. },
                    ..
                }
            )
        })
        .filter_map(|rerun| executions.iter().find(|e| e.execution == rerun.earlier))
        .filter_map(|execution| execution.caller_request_id.as_deref())
        .collect()
}
