//! The partition row of the guarantee table (`docs/guarantee.md#where-it-is-at-least-once`):
//! the winner's proxy could not reach any lease-store for longer than the lease while the
//! stores and Postgres stayed healthy, so a retry through another proxy took the expired
//! lease over. `judgement.rs` has already shown what every row needs (same body and
//! fingerprint, every claim in between a takeover, no settle of the earlier fence landed
//! before the takeover); this row then needs, from the history:
//!
//! 1. a `proxy_partition` of the very Envoy that forwarded the earlier execution, which
//!    began after its claim was won (so after it could dispatch upstream) and before the
//!    takeover and any landed settle of that claim;
//! 2. that cut lasted longer than the policy's lease (the history records `lease_ms`;
//!    without it nothing is excused);
//! 3. no other fault was active from the cut to the takeover: the stores and Postgres were
//!    healthy, so the lease ran out for the partition and nothing else;
//! 4. if the earlier caller had its answer before the takeover, the proxy logged handing
//!    the record to its outbox before then (the answer went out with the record waiting,
//!    and the record then lost to the takeover: its late settle gets `lease_lost`). A
//!    caller that got its answer only after the takeover (the stream held it while its
//!    finalize could not get through) lost its record to the takeover too, when the proxy
//!    logged that fence's settle refused as `lease_lost` (by the stream or its outbox).

use super::evidence::ClaimWon;
use super::judgement::{Row, answered_by, handed_off_by};
use crate::history::{Attempt, Execution, FaultKind, History, Ms};
use std::collections::HashMap;

/// What every row of a re-run reads about the earlier execution (the dead-proxy, VM,
/// hot-restart and partition rows).
pub struct Earlier<'a> {
    /// The earlier execution.
    pub execution: &'a Execution,
    /// The Envoy that forwarded it.
    pub envoy: usize,
    /// Its claim.
    pub claim: &'a ClaimWon,
    /// When a settle of that claim first landed, if one did.
    pub landed: Option<Ms>,
}

impl Earlier<'_> {
    /// What every row's cause must come before: the takeover, and any landed settle.
    pub fn deadline(&self, takeover: &ClaimWon) -> Ms {
        self.landed
            .map_or(takeover.at_ms, |at| at.min(takeover.at_ms))
    }
}

/// `Ok(None)` when no partition of the earlier fence's proxy fits; `Err` when one fits in
/// time but another condition of the row is not shown.
pub fn proxy_partitioned(
    earlier: &Earlier<'_>,
    takeover: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let before = earlier.deadline(takeover);
    let Some(cut) = history.faults.iter().find(|fault| {
        fault.kind == FaultKind::ProxyPartition
            && fault.target == earlier.envoy
            && earlier.claim.at_ms <= fault.start_ms
            && fault.start_ms < before
    }) else {
        return Ok(None);
    };
    let envoy = earlier.envoy;
    let Some(lease_ms) = history.lease_ms else {
        return Err(format!(
            "envoy-{envoy} was cut off at {} ms, but the history does not record the lease",
            cut.start_ms
        ));
    };
    let lasted = cut.end_ms - cut.start_ms;
    if lasted <= i64::try_from(lease_ms).unwrap_or(i64::MAX) {
        return Err(format!(
            "envoy-{envoy} was cut off from the lease-stores for {lasted} ms (fault {}), \
             not longer than the {lease_ms} ms lease",
            cut.id
        ));
    }
    if let Some(other) = history
        .faults
        .iter()
        .find(|fault| fault.id != cut.id && fault.overlaps(cut.start_ms, takeover.at_ms))
    {
        return Err(format!(
            "while envoy-{envoy} was cut off (fault {}), fault {} ({}) was active before the \
             takeover at {} ms: the stores and Postgres were not shown healthy",
            cut.id,
            other.id,
            other.kind.name(),
            takeover.at_ms
        ));
    }
    let Some(answered) = answered_by(earlier.execution, attempts_by_id, takeover.at_ms) else {
        let answered_later = answered_by(earlier.execution, attempts_by_id, Ms::MAX).is_some();
        let refused = history
            .evidence
            .proxy_event(envoy, earlier.claim.fence, "lease_lost")
            .is_some();
        return Ok(Some(Row::ProxyPartitioned {
            fault: cut.id,
            answer_delivered: answered_later && refused,
        }));
    };
    if !handed_off_by(history, envoy, earlier.claim.fence, takeover.at_ms) {
        return Err(format!(
            "envoy-{envoy}'s caller got the answer at {answered} ms, before the takeover at {} \
             ms, but the proxy logged no hand-off of fence {}: its record should have been written",
            takeover.at_ms, earlier.claim.fence
        ));
    }
    Ok(Some(Row::ProxyPartitioned {
        fault: cut.id,
        answer_delivered: true,
    }))
}
