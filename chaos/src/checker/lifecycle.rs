//! The proxy-lifecycle faults in the first at-least-once row of the guarantee table
//! (`docs/guarantee.md#where-it-is-at-least-once`): a drained Envoy ends at once on
//! `SIGTERM`, and a push of another Wasm module destroys the retired VM, each with its
//! outbox (`docs/envoy-facts.md#drain-and-shutdown`,
//! `docs/envoy-facts.md#a-retired-root-context-keeps-working`). `judgement.rs` has already
//! shown what every row needs (same body and fingerprint, every claim in between a
//! takeover, no settle of the earlier fence landed before the takeover).
//!
//! - **A process that ended** ([`process_ended`]): an Envoy kill ends it at its start, a
//!   drain at its `SIGTERM` (`proxy_gone_ms`). The dead-proxy row then holds it to the
//!   kill's conditions: the claim won before that moment, the moment before the takeover
//!   and any landed settle, the hand-off logged if the caller had its answer.
//! - **A VM a module push destroyed** ([`vm_retired`]): the Envoy that forwarded the
//!   earlier execution logged, on retiring a root context, that fence's settle call still
//!   in its outbox (`evidence=retired`); a `wasm_upgrade` of that Envoy then saw the old
//!   VMs gone (`proxy_gone_ms`) — the first such push at or after the retirement, the one
//!   that destroyed the VM the retired context lived in — before the takeover and any
//!   landed settle. A retirement with no module push after it (a configuration push keeps
//!   the VM, whose retired context keeps delivering) excuses nothing.

use std::collections::HashMap;

use super::evidence::ClaimWon;
use super::judgement::{Row, answered_by};
use crate::history::{Attempt, Execution, Fault, FaultKind, History, Ms};

/// When `fault` ended the Envoy process it hit, for the faults that end one: an Envoy
/// kill at its start, a drain at its `SIGTERM`. `None` for any other fault, and for a
/// drain whose `SIGTERM` was not recorded.
pub fn process_ended(fault: &Fault) -> Option<Ms> {
    match fault.kind {
        FaultKind::EnvoyKill => Some(fault.start_ms),
        FaultKind::EnvoyDrain => fault.proxy_gone_ms,
        _ => None,
    }
}

/// The row of a record destroyed with its retired VM: `Ok(None)` when Envoy `envoy` logged
/// no retirement of `claim`'s settle call, `Err` when it did but no module push shows the
/// VM destroyed before the takeover and any landed settle.
pub fn vm_retired(
    earlier: &Execution,
    envoy: usize,
    claim: &ClaimWon,
    takeover: &ClaimWon,
    landed: Option<Ms>,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let Some(retired) = history.evidence.proxy_event(envoy, claim.fence, "retired") else {
        return Ok(None);
    };
    let fence = claim.fence;
    let push = history
        .faults
        .iter()
        .filter(|fault| fault.kind == FaultKind::WasmUpgrade && fault.target == envoy)
        .filter_map(|fault| Some((fault, fault.proxy_gone_ms?)))
        .filter(|(_, gone)| *gone >= retired.at_ms)
        .min_by_key(|(_, gone)| *gone);
    let Some((push, gone)) = push else {
        return Err(format!(
            "envoy-{envoy} retired fence {fence}'s settle call at {} ms, but no module push \
             destroyed that VM afterwards",
            retired.at_ms
        ));
    };
    let before = landed.map_or(takeover.at_ms, |at| at.min(takeover.at_ms));
    if gone >= before {
        return Err(format!(
            "envoy-{envoy}'s old VMs were gone at {gone} ms, not before the takeover (fence \
             {}) at {} ms{}",
            takeover.fence,
            takeover.at_ms,
            landed.map_or(String::new(), |at| format!(" or the settle at {at} ms"))
        ));
    }
    Ok(Some(Row::VmRetired {
        fault: push.id,
        answer_delivered: answered_by(earlier, attempts_by_id, gone).is_some(),
    }))
}
