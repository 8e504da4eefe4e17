//! The partition row of the guarantee table (`docs/guarantee.md#where-it-is-at-least-once`):
//! the winner's proxy could not reach any lease-store while its lease ran out, and the
//! stores and Postgres stayed healthy, so a retry through another proxy took the expired
//! lease over. `rerun.rs` has already shown what every row needs (same body and
//! fingerprint, every claim in between a takeover, no settle of the earlier fence landed
//! before the takeover); this row then needs, from the history:
//!
//! 1. a `proxy_partition` of the very Envoy that forwarded the earlier execution (or a
//!    `slow_link` of it, slowed until its calls time out: a partition for its renews), which
//!    began before the takeover and any landed settle of that claim and ended after the
//!    claim was won. Its span is the one it certainly held (`Fault::in_place_ms`: from the
//!    moment its rules were in place to the moment their removal began). The history
//!    records the lease, how the proxy renews it, and the renews that landed (the stores'
//!    `renewed` lines: `History::lease_ms`, `History::renewal`); without all of them
//!    nothing is excused. Several such faults of that proxy back to back (a flapping link)
//!    count as one cut, from the first to lift after the lease was last extended (2.) to
//!    the last, when each came in place before a renew was due to land after the one
//!    before began to lift (4.'s bound); one that lifted before that extension kept no
//!    later renew out, and one with a renew due in between shows a proxy that had stopped
//!    renewing;
//! 2. the lease was last extended (by its last renew before the takeover, or by the claim)
//!    no earlier than a lease before the takeover, give or take how late a store may log a
//!    renew it committed: a takeover of a lease that had not run out is the store's fault,
//!    not the partition's;
//! 3. the cut was in place no later than two renew intervals after that: a proxy that
//!    reaches a store renews every interval (give or take a tick and a busy Envoy: the
//!    second interval), so a renew that should have landed before the cut and did not is
//!    a proxy that stopped renewing, not one that was cut off;
//! 4. the takeover came no later than a call timeout and two renew intervals after the
//!    cut began to lift: by then the proxy's hung renews have timed out and its next one
//!    has landed, and a renew of a lease not taken over keeps it, lapsed or not
//!    (`lease-store/src/store/lease.rs`). With 2. and 3. this also bounds the cut from
//!    below: one shorter than the lease may let it run out (a cut just after a renew, the
//!    renew sent last before the lift hanging until its timeout), one much shorter may not;
//! 5. no other fault was active from the cut to the takeover: the stores and Postgres
//!    were healthy, so the lease ran out for the partition and nothing else;
//! 6. if the earlier caller had its answer before the takeover, the proxy logged handing
//!    the record to its outbox before then (the answer went out with the record waiting,
//!    and the record then lost to the takeover: its late settle gets `lease_lost`). A
//!    caller that got its answer only after the takeover (the stream held it while its
//!    finalize could not get through) lost its record to the takeover too, when the proxy
//!    logged that fence's settle refused as `lease_lost` (by the stream or its outbox).

use super::evidence::ClaimWon;
use super::rerun::{answered_by, handed_off_by};
use super::verdict::{Row, SETTLE_LOG_SLACK_MS};
use crate::history::{Attempt, Execution, Fault, FaultKind, History, Ms};
use std::collections::HashMap;

/// How much earlier than its log line a renew may have committed: a store logs it after
/// the commit, as it logs a settle ([`SETTLE_LOG_SLACK_MS`]).
pub(super) const RENEW_LOG_SLACK_MS: Ms = SETTLE_LOG_SLACK_MS;

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

/// `Ok(None)` when no partition of the earlier fence's proxy overlaps its claim's lease;
/// `Err` when one does but another condition of the row is not shown.
pub fn proxy_partitioned(
    earlier: &Earlier<'_>,
    takeover: &ClaimWon,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> Result<Option<Row>, String> {
    let before = earlier.deadline(takeover);
    let envoy = earlier.envoy;
    let cuts: Vec<&Fault> = history
        .faults
        .iter()
        .filter(|fault| {
            FaultKind::KEEPS_RENEWS_OUT.contains(&fault.kind)
                && fault.target == envoy
                && fault.start_ms < before
                && earlier.claim.at_ms < fault.end_ms
        })
        .collect();
    let Some(first) = cuts.first() else {
        return Ok(None);
    };
    let named = |cut: &Fault| format!("fault {}, {}", cut.id, cut.kind.name());
    let (Some(lease_ms), Some(renewal)) = (history.lease_ms, history.renewal) else {
        return Err(format!(
            "envoy-{envoy} was cut off at {} ms ({}), but the history does not record \
             the lease or how it is renewed",
            first.start_ms,
            named(first)
        ));
    };
    let mut spans = Vec::new();
    for cut in &cuts {
        let Some((in_place, lifting)) = cut.in_place_ms else {
            return Err(format!(
                "envoy-{envoy} was cut off at {} ms ({}), but the history does not record \
                 when the cut was in place",
                cut.start_ms,
                named(cut)
            ));
        };
        spans.push((*cut, in_place, lifting));
    }
    if !renewal.logged {
        return Err(format!(
            "envoy-{envoy} was cut off at {} ms ({}), but the history does not record \
             which renews landed, so when its lease was last extended is not known",
            first.start_ms,
            named(first)
        ));
    }
    let ms = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    let (lease, interval) = (ms(lease_ms), ms(renewal.interval_ms));
    // After a cut lifts, the proxy's hung renews time out and its next one lands.
    let renewed_after = |lifting: Ms| lifting + ms(renewal.call_timeout_ms) + 2 * interval;
    let extended = history
        .evidence
        .lease_last_extended(earlier.claim, takeover.at_ms);
    if takeover.at_ms + RENEW_LOG_SLACK_MS < extended + lease {
        return Err(format!(
            "fence {} took the lease over at {} ms, but fence {}'s lease was extended at \
             {extended} ms for {lease_ms} ms: it had not run out",
            takeover.fence, takeover.at_ms, earlier.claim.fence
        ));
    }
    // The cuts that kept renews out after the last extension, in order: one that lifted
    // before it did not stop the proxy renewing.
    spans.retain(|(_, _, lifting)| *lifting > extended);
    spans.sort_by_key(|(_, in_place, _)| *in_place);
    let (Some(&(cut, in_place, _)), Some(&(last, _, lifting))) = (spans.first(), spans.last())
    else {
        return Err(format!(
            "envoy-{envoy} last extended fence {}'s lease at {extended} ms, after its every \
             cut had begun to lift ({}): nothing kept its later renews out",
            earlier.claim.fence,
            named(first)
        ));
    };
    let renew_due_by = extended + 2 * interval;
    if in_place > renew_due_by {
        return Err(format!(
            "envoy-{envoy} last extended fence {}'s lease at {extended} ms and was cut off \
             only from {in_place} ms ({}): renewing every {} ms, it had stopped \
             renewing before the cut",
            earlier.claim.fence,
            named(cut),
            renewal.interval_ms
        ));
    }
    // Back-to-back cuts add up only when no renew was due to land between them.
    for pair in spans.windows(2) {
        let [(before, _, lifted), (next, next_in_place, _)] = pair else {
            continue;
        };
        if *next_in_place > renewed_after(*lifted) {
            return Err(format!(
                "envoy-{envoy}'s link was restored between {lifted} ms ({}) and {next_in_place} \
                 ms ({}): its renew, landing by {} ms, would have extended fence {}'s lease",
                named(before),
                named(next),
                renewed_after(*lifted),
                earlier.claim.fence
            ));
        }
    }
    let renewed_again_by = renewed_after(lifting);
    if takeover.at_ms > renewed_again_by {
        return Err(format!(
            "fence {} took the lease over at {} ms, but envoy-{envoy}'s cut ({}) began \
             to lift at {lifting} ms: its renew, landing by {renewed_again_by} ms, would have \
             kept the lease",
            takeover.fence,
            takeover.at_ms,
            named(last)
        ));
    }
    if let Some(other) = history.faults.iter().find(|fault| {
        !spans.iter().any(|(cut, _, _)| cut.id == fault.id)
            && fault.overlaps(cut.start_ms, takeover.at_ms)
    }) {
        return Err(format!(
            "while envoy-{envoy} was cut off ({}), fault {} ({}) was active before the \
             takeover at {} ms: the stores and Postgres were not shown healthy",
            named(cut),
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
