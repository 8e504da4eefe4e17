//! Drawing the keys: when each starts, what the upstream is asked to answer for it, which
//! policy guards it, and its callers — first, impatient, late and conflicting — with the
//! Envoy each attempt goes through.

use rand::RngExt;
use rand::rngs::StdRng;

use super::{
    CallerPlan, KeyPlan, MAX_ATTEMPTS, PATIENT_TIMEOUT_MS, Settings, Uncertain, UpstreamAnswer,
    weighted,
};
use crate::history::Role;

/// The upstream delays a key may get (`?delay_ms=`), with their weights.
const DELAYS_MS: [(u64, u32); 4] = [(0, 20), (200, 30), (800, 25), (1500, 25)];

/// What the upstream is asked to answer for a key, with their weights: mostly the usual
/// 201, and for some keys each other row of the status matrix
/// (`docs/guarantee.md#every-answer-after-which-a-retry-runs-again`).
pub(super) const ANSWERS: [(UpstreamAnswer, u32); 7] = [
    (UpstreamAnswer::Created, 70),
    (UpstreamAnswer::SeeOther, 5),
    (UpstreamAnswer::Found, 5),
    (UpstreamAnswer::Unprocessable, 5),
    (UpstreamAnswer::Unavailable, 5),
    (UpstreamAnswer::Reset, 5),
    (UpstreamAnswer::PastTheLease, 5),
];

pub(super) fn draw_keys(rng: &mut StdRng, settings: &Settings) -> Vec<KeyPlan> {
    let replicas = settings.replicas.max(1);
    let mut keys = Vec::new();
    let mut start_ms = 0;
    while start_ms < settings.duration_ms {
        let index = keys.len();
        let key = format!("chaos-{index:05}");
        let answer = weighted(rng, &ANSWERS);
        // Drawn apart, so a run without a reconcile policy keeps its seeds' plans.
        let uncertain = match rng.random_bool(0.3) {
            true => Uncertain::Retry,
            false if settings.reconcile && rng.random_bool(0.5) => Uncertain::Reconcile,
            false => Uncertain::Hold,
        };
        let delay_ms = match answer {
            UpstreamAnswer::PastTheLease => settings.lease_ms + rng.random_range(500..1500),
            _ => weighted(rng, &DELAYS_MS),
        };
        let mut callers = Vec::new();
        let first = if rng.random_bool(0.2) { 3 } else { 2 };
        for n in 0..first {
            // Impatient: gives up mid-request (the upstream is still running), then retries.
            let impatient = delay_ms >= 800 && rng.random_bool(0.25) && settings.give_up;
            let first_timeout_ms = if impatient {
                delay_ms / 3
            } else {
                PATIENT_TIMEOUT_MS
            };
            let start_after_ms = rng.random_range(0..30);
            callers.push(caller(
                rng,
                format!("{key}-first-{n}"),
                Role::First,
                start_after_ms,
                n % replicas,
                first_timeout_ms,
                replicas,
            ));
        }
        let late_after_ms = rng.random_range(200..2 * settings.lease_ms.max(201));
        let late_envoy = rng.random_range(0..replicas);
        callers.push(caller(
            rng,
            format!("{key}-late"),
            Role::Late,
            late_after_ms,
            late_envoy,
            PATIENT_TIMEOUT_MS,
            replicas,
        ));
        if rng.random_bool(0.08) {
            let after = rng.random_range(0..500);
            let envoy = rng.random_range(0..replicas);
            callers.push(caller(
                rng,
                format!("{key}-conflict"),
                Role::Conflict,
                after,
                envoy,
                PATIENT_TIMEOUT_MS,
                replicas,
            ));
        }
        keys.push(KeyPlan {
            key,
            start_ms,
            delay_ms,
            amount: 100 * (index as u64 + 1),
            answer,
            uncertain,
            callers,
        });
        start_ms += rng.random_range(100..300);
    }
    keys
}

fn caller(
    rng: &mut StdRng,
    name: String,
    role: Role,
    start_after_ms: u64,
    first_envoy: usize,
    first_timeout_ms: u64,
    replicas: usize,
) -> CallerPlan {
    let mut envoys = vec![first_envoy];
    envoys.extend((1..MAX_ATTEMPTS).map(|_| rng.random_range(0..replicas)));
    let backoff_ms = (1..MAX_ATTEMPTS)
        .map(|_| rng.random_range(100..600))
        .collect();
    CallerPlan {
        name,
        role,
        start_after_ms,
        envoys,
        first_timeout_ms,
        backoff_ms,
    }
}
