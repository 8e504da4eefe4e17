//! Drawing the faults: which kind comes next by weight, aimed at which part, held how
//! long — link faults short, mid-length or past the lease, then a quiet time for leases to be
//! renewed — and which overlap or flap.

use rand::RngExt;
use rand::rngs::StdRng;

use super::{FaultStep, Part, Settings, weighted};
use crate::history::FaultKind;

/// The fault kinds with their weights.
const FAULT_WEIGHTS: [(FaultKind, u32); 18] = [
    (FaultKind::StoreKill, 35),
    (FaultKind::StoreFreeze, 25),
    (FaultKind::PostgresCrash, 15),
    (FaultKind::PostgresFreeze, 10),
    (FaultKind::EnvoyKill, 25),
    // A failover and the old node's rejoin take 15–20 s: rarer, or the run is all failover.
    (FaultKind::PrimaryNodeDeath, 10),
    (FaultKind::PluginPush, 10),
    (FaultKind::ProxyPartition, 20),
    (FaultKind::StoreDbPartition, 10),
    (FaultKind::OneWayLoss, 10),
    (FaultKind::SlowLink, 10),
    (FaultKind::EnvoyDrain, 15),
    (FaultKind::WasmUpgrade, 10),
    (FaultKind::RollingUpgrade, 10),
    (FaultKind::EnvoyHotRestart, 10),
    (FaultKind::OperatorErase, 5),
    (FaultKind::OperatorResolve, 5),
    (FaultKind::OperatorResolveFailed, 5),
];

/// The Envoy a rolling upgrade moves to the previous release and back (Envoy 0 takes the
/// plugin pushes, which the previous release may not read).
pub(super) const ROLLING_TARGET: usize = 1;

/// What [`renewable`] leaves for a renew's round trip after a link fault heals.
const LINK_RENEW_MARGIN_MS: u64 = 300;

/// Past a lease after a link fault heals, before the next fault starts: time for the cut
/// proxy's renew (sent at once when its calls get through again) to land.
const LINK_QUIET_MARGIN_MS: u64 = 500;

/// The lease-stores' answer bound: their default `--statement-timeout` (5 s,
/// `docs/configuration.md`) and the margin past it (`store/mod.rs`). A Postgres freeze
/// sometimes outlasts it, so that a claim a store gave up on commits after it answered.
pub(super) const STORE_ANSWER_BOUND_MS: u64 =
    5_000 + keyflight_lease_store::store::ANSWER_MARGIN.as_millis() as u64;

/// How often a fault is drawn to overlap the next one (two faults at once).
const OVERLAP_PROBABILITY: f64 = 0.2;

/// How often a cut or slow link is followed at once by another of the same proxy: a
/// flapping link, whose faults add up past the lease.
const FLAP_PROBABILITY: f64 = 0.3;

pub(super) fn draw_faults(rng: &mut StdRng, settings: &Settings) -> Vec<FaultStep> {
    let replicas = settings.replicas.max(1);
    let weights: Vec<(FaultKind, u32)> = FAULT_WEIGHTS
        .into_iter()
        .filter(|(kind, _)| settings.fault_kinds.contains(kind))
        .collect();
    let mut faults = Vec::new();
    if weights.is_empty() {
        return faults;
    }
    // Each step takes at least its gap and hold; plan until that alone fills the run.
    let mut planned_ms = 0;
    let mut on_the_previous_release = false;
    let flapping_kinds: Vec<FaultKind> = FaultKind::KEEPS_RENEWS_OUT
        .into_iter()
        .filter(|kind| settings.fault_kinds.contains(kind))
        .collect();
    while planned_ms < settings.duration_ms {
        // A flapping link: right after a cut or slow link, another of the same proxy, the
        // two judged as one partition when no renew was due to land between them
        // (`checker/partition.rs`).
        let flap = match faults.last() {
            Some(previous)
                if FaultKind::KEEPS_RENEWS_OUT.contains(&previous.kind)
                    && !flapping_kinds.is_empty() =>
            {
                rng.random_bool(FLAP_PROBABILITY).then(|| {
                    let kind = flapping_kinds[rng.random_range(0..flapping_kinds.len())];
                    (kind, previous.target)
                })
            }
            _ => None,
        };
        if let Some((kind, target)) = flap {
            let gap_ms = rng.random_range(200..1000);
            let hold_ms = partition_hold(rng, settings);
            planned_ms += gap_ms + hold_ms;
            faults.push(FaultStep {
                gap_ms,
                kind,
                target,
                hold_ms,
                overlaps_next: false,
            });
            continue;
        }
        let kind = weighted(rng, &weights);
        let target = match kind {
            // The partition whose database dies or freezes, on a partitioned one.
            FaultKind::PostgresCrash | FaultKind::PostgresFreeze if settings.partitions > 1 => {
                rng.random_range(0..settings.partitions)
            }
            // Only Envoy 0 of the stack takes its listener from LDS.
            FaultKind::PostgresCrash
            | FaultKind::PostgresFreeze
            | FaultKind::PrimaryNodeDeath
            | FaultKind::PluginPush
            | FaultKind::WasmUpgrade => 0,
            // Envoy 0 takes the plugin pushes, which the previous release may not read.
            FaultKind::RollingUpgrade => ROLLING_TARGET,
            _ => rng.random_range(0..replicas),
        };
        // While Envoy 1 runs the previous release, no other fault is aimed at it: that
        // release logs no evidence, so the judge could rule on nothing its own failure
        // costs (chaos/README.md#known-gaps); it still meets every fault of the parts it
        // shares.
        let aimed_at_the_old_proxy = FaultStep {
            gap_ms: 0,
            kind,
            target,
            hold_ms: 0,
            overlaps_next: false,
        }
        .part()
            == Part::Envoy(ROLLING_TARGET);
        let target = match kind {
            FaultKind::RollingUpgrade => {
                on_the_previous_release = !on_the_previous_release;
                target
            }
            _ if on_the_previous_release && aimed_at_the_old_proxy => 0,
            _ => target,
        };
        let hold_ms = match kind {
            FaultKind::StoreKill | FaultKind::PostgresCrash => rng.random_range(300..1500),
            // Past the filter's call timeout, so calls to the frozen replica time out.
            FaultKind::StoreFreeze => {
                rng.random_range(settings.call_timeout_ms + 200..settings.call_timeout_ms + 1500)
            }
            // From within a call timeout to past the lease and the stores' answer bound.
            FaultKind::PostgresFreeze => rng.random_range(300..STORE_ANSWER_BOUND_MS + 1500),
            FaultKind::EnvoyKill => rng.random_range(100..600),
            // Time on one node after the promotion, before the dead node rejoins.
            FaultKind::PrimaryNodeDeath => rng.random_range(500..3000),
            // The push is over once Envoy accepted it; the old plugin drains meanwhile.
            FaultKind::PluginPush => rng.random_range(100..600),
            // A termination drain: past the longest upstream delay for some, not others.
            FaultKind::EnvoyDrain => rng.random_range(300..2500),
            // The heal waits until the old VMs are gone (after the 1 s listener drain).
            FaultKind::WasmUpgrade => rng.random_range(100..600),
            // The new process is ready when the fault starts holding.
            FaultKind::RollingUpgrade => rng.random_range(100..600),
            // The child is live when the fault starts holding; the heal waits for the
            // parent's exit (`--parent-shutdown-time-s` after the child started).
            FaultKind::EnvoyHotRestart => rng.random_range(100..600),
            FaultKind::ProxyPartition | FaultKind::SlowLink => partition_hold(rng, settings),
            FaultKind::StoreDbPartition => rng.random_range(300..3000),
            // Past the call timeout, short enough that every lease is renewed in time: the
            // stores still apply the proxy's renews, so no row excuses a lease that ran
            // out under it.
            FaultKind::OneWayLoss => {
                rng.random_range(settings.call_timeout_ms + 100..=renewable(settings))
            }
            // One admin call; the pause lets retries of the key meet the change.
            FaultKind::OperatorErase
            | FaultKind::OperatorResolve
            | FaultKind::OperatorResolveFailed => rng.random_range(100..600),
        };
        let gap_ms = rng.random_range(200..1000);
        // After a link fault (a flapping one's last), a lease of quiet: the partition row
        // excuses cuts that ran a lease out with every other part healthy, and the judge
        // adds up only the cuts and slow links of that one proxy, so another fault must not
        // start before the proxy has renewed (chaos/README.md#known-gaps).
        let gap_ms = match faults.last() {
            Some(previous) if FaultKind::NETWORK.contains(&previous.kind) => {
                gap_ms.max(settings.lease_ms + LINK_QUIET_MARGIN_MS)
            }
            _ => gap_ms,
        };
        planned_ms += gap_ms + hold_ms;
        let overlaps = rng.random_bool(OVERLAP_PROBABILITY);
        let step = FaultStep {
            gap_ms,
            kind,
            target,
            hold_ms,
            overlaps_next: false,
        };
        // An overlapping pair is two steps (never three at once) on two parts. A link
        // fault is never part of a pair: the partition row of the guarantee is judged on a
        // cut with no other fault beside it (`checker/partition.rs`).
        let count = faults.len();
        let paired = count >= 2 && faults[count - 2].overlaps_next;
        let links = FaultKind::NETWORK.contains(&step.kind);
        if let Some(previous) = faults.last_mut()
            && (paired || links || previous.part() == step.part())
        {
            previous.overlaps_next = false;
        }
        faults.push(FaultStep {
            overlaps_next: overlaps && !links,
            ..step
        });
    }
    if let Some(last) = faults.last_mut() {
        last.overlaps_next = false;
    }
    faults
}

/// A proxy partition's or slow link's hold (either keeps the proxy's renews out), one of
/// three lengths alike: short enough that every lease is
/// renewed in time ([`renewable`]: the outbox lands the record once the link heals);
/// between that and the lease, where whether a lease runs out depends on when its last
/// renew landed (the stores log each one, and the partition row reads them); or outlasting
/// the lease by up to 3 s, where every lease the cut caught runs out (the partition row of
/// the guarantee, `docs/guarantee.md#where-it-is-at-least-once`).
fn partition_hold(rng: &mut StdRng, settings: &Settings) -> u64 {
    let renewable = renewable(settings);
    match rng.random_range(0..3) {
        0 => rng.random_range(settings.call_timeout_ms + 100..=renewable),
        1 => rng.random_range(renewable + 1..=settings.lease_ms + 500),
        _ => rng.random_range(settings.lease_ms + 500..settings.lease_ms + 3000),
    }
}

/// The longest link fault after which every lease is still renewed in time, wherever it
/// starts: a lease last extended up to a renew interval before the fault, and once the link
/// heals a renew that may wait a call timeout for one of the two hung before it to give up
/// its slot, plus a margin for the round trip. Never under the call timeout (and a bit),
/// so calls time out during the fault.
pub(super) fn renewable(settings: &Settings) -> u64 {
    settings
        .lease_ms
        .saturating_sub(
            settings.renew_interval_ms + settings.call_timeout_ms + LINK_RENEW_MARGIN_MS,
        )
        .max(settings.call_timeout_ms + 100)
}
