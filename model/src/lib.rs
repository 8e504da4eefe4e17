//! keyflight's protocol, model-checked with the real filter code
//! (`docs/model.md`).
//!
//! Several proxies each run the real stream machine and record outbox of
//! `keyflight-filter`; several lease-store replicas each keep a takeover grace; one
//! database mirrors the store's SQL statement by statement; an upstream runs what
//! is forwarded (under `uncertain: reconcile`, a service whose ledger answers the
//! filter's question, [`service`]); clients retry. Time advances in ticks of [`TICK_MS`]. Faults are
//! steps like any other: a proxy crash, a replica freeze, a message lost, delayed
//! past its timeout or delivered twice, a database restart, a caller giving up.
//! The checker explores every interleaving up to a bound and holds every reachable
//! state to the properties of [`properties`].
//!
//! **The checker is `stateright`** (0.31, crates.io): an explicit-state model checker
//! for Rust models — breadth-first search with fingerprint deduplication over
//! several threads, `always`/`sometimes` properties, and a counterexample path of
//! actions for every violation. It checks Rust values directly, so the model calls
//! the filter's own `Machine` and `Outbox` instead of restating them in TLA+ (which
//! would check a transcription, not the code), and it builds from crates.io with
//! no other tool. It is the maintained Rust checker of its kind (releases through
//! 2025, used for Paxos/Raft models); the alternatives either explore no interleavings
//! (proptest, simulation) or need an external toolchain (TLC, Apalache, Kani).

pub mod check;
pub mod db;
pub mod ghost;
pub mod proxy;
pub mod replica;
pub mod service;
pub mod world;

use stateright::{Model, Property};

use crate::world::{Step, World};

/// One tick of the model's clock. The filter's renew interval and call timeout are
/// at most a tick in the configurations below, so each takes one tick here.
pub const TICK_MS: u64 = 500;

/// A deliberate bug, to show the properties catch it (`docs/model.md#mutations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The claim's `$6` is always true: takeovers ignore the replica's grace.
    TakeoverIgnoresGrace,
    /// The store's own grace holds only while the database fails: its comparison with
    /// its end is gone (`keyflight-store-core`'s `mutation-hooks` feature:
    /// `TakeoverGrace::mutate_hold_only_while_failing`).
    GraceOnlyWhileFailing,
    /// Cleanup deletes `pending` rows past retention whatever their lease.
    CleanupDeletesLivePending,
    /// `FINALIZE_SQL` without `claim_id = $2`.
    FinalizeUnfenced,
    /// The `steal` branch without `fingerprint = $2`.
    StealIgnoresFingerprint,
    /// The outbox drops a delivery on a transient error (the filter's
    /// `mutation-hooks` feature: `Outbox::mutate_drop_on_transient_error`).
    OutboxDropsOnTransientError,
    /// `lease_store.timeout_ms` set past the renew rule after validation.
    RenewTimeoutPastSlack,
    /// The `steal` branch without `NOT at_most_once`: a hold policy's lapsed lease is
    /// taken over instead of held.
    StealIgnoresHold,
    /// `steal` and `held` read only the row's `at_most_once`, not the claim's: a hold
    /// policy's retry takes over the lapsed lease of a claim that carried no flag.
    HoldIgnoresTheRetrysFlag,
    /// The service's ledger admits a commit at its floor's own fence (`<` for `<=`).
    FloorAdmitsItsFence,
    /// The service answers `absent` without leaving a floor.
    AbsentWithoutFloor,
}

/// The policy's `uncertain`, the filter's own setting (the model checks `hold`, `retry` and
/// `reconcile`).
pub use keyflight_filter::config::Uncertain;

/// The filter's plugin configuration, in the few numbers the model varies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FilterParams {
    /// `lease_ms`.
    pub lease_ms: u64,
    /// `renew_interval_ms`.
    pub renew_ms: u64,
    /// `lease_store.timeout_ms`.
    pub timeout_ms: u64,
    /// `record_retry_budget_ms`.
    pub budget_ms: u64,
    /// `retention_s`.
    pub retention_s: u64,
    /// A timeout applied after validation (the renew-slack mutation).
    pub timeout_override_ms: Option<u64>,
    /// `uncertain`.
    pub uncertain: Uncertain,
    /// `reconcile.timeout_ms` (under `uncertain: reconcile`).
    pub reconcile_timeout_ms: u64,
    /// `record: after_reply`; `false` is the default `before_reply`.
    pub after_reply: bool,
}

/// One client: the operation it sends (its body) and how many attempts it makes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientSpec {
    /// The operation.
    pub op: u8,
    /// Attempts.
    pub attempts: u8,
}

/// The bounds and settings of one check.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Params {
    /// Proxies.
    pub proxies: usize,
    /// Lease-store replicas.
    pub replicas: usize,
    /// Clients.
    pub clients: Vec<ClientSpec>,
    /// Time stops here (ticks).
    pub horizon_ticks: u64,
    /// Faults allowed in one history.
    pub faults: u8,
    /// The upstream answers within this many ticks.
    pub upstream_ticks: u64,
    /// `--takeover-grace`.
    pub grace_ms: u64,
    /// `--settle-horizon`.
    pub settle_horizon_ms: u64,
    /// The filter's configuration.
    pub filter: FilterParams,
    /// A proxy on a release before at-most-once leases: its claims carry no
    /// `at_most_once` whatever the policy (`docs/operations.md#upgrades`).
    pub unflagged_proxy: Option<u8>,
    /// A deliberate bug.
    pub mutation: Option<Mutation>,
}

impl Params {
    /// The bounded check `make test` runs: two proxies, two replicas, one client that
    /// tries three times, one fault per history.
    pub fn bounded() -> Params {
        Params {
            proxies: 2,
            replicas: 2,
            clients: vec![ClientSpec { op: 0, attempts: 2 }],
            horizon_ticks: 10,
            faults: 1,
            upstream_ticks: 2,
            grace_ms: 3000,
            settle_horizon_ms: 4000,
            filter: FilterParams {
                // A renew every tick, a timeout within one, and renew + 2 × timeout +
                // the slack well inside the lease, in ticks as in milliseconds.
                lease_ms: 2500,
                renew_ms: 500,
                timeout_ms: 100,
                budget_ms: 4000,
                retention_s: 3,
                timeout_override_ms: None,
                uncertain: Uncertain::Hold,
                reconcile_timeout_ms: 100,
                after_reply: false,
            },
            unflagged_proxy: None,
            mutation: None,
        }
    }

    /// The deeper check of `make model`: a longer horizon (about a minute; a
    /// second client or a second fault per history takes hours at this depth).
    pub fn deep() -> Params {
        Params {
            horizon_ticks: 13,
            ..Params::bounded()
        }
    }

    /// The bounded check with the policy's `uncertain: reconcile`
    /// (`docs/model.md#the-service`).
    pub fn reconciling() -> Params {
        let mut params = Params::bounded();
        params.filter.uncertain = Uncertain::Reconcile;
        params
    }

    /// `self` with `mutation`, and the filter set up as the mutation needs.
    pub fn mutated(mut self, mutation: Mutation) -> Params {
        self.mutation = Some(mutation);
        if mutation == Mutation::HoldIgnoresTheRetrysFlag {
            self.unflagged_proxy = Some(0);
        }
        if mutation == Mutation::RenewTimeoutPastSlack {
            self.filter.timeout_override_ms = Some(self.filter.lease_ms);
        }
        self
    }

    /// A won claim ends (settled, released or expired) within this long (ms):
    /// the upstream's run, the settle call's timeout, the outbox's budget, a lease.
    pub fn settle_bound_ms(&self) -> u64 {
        (self.upstream_ticks + 2) * TICK_MS
            + self.filter.budget_ms
            + self.filter.lease_ms
            + self.filter.timeout_override_ms.unwrap_or(0)
    }
}

/// The model: the world under `params`.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Its bounds and settings.
    pub params: Params,
}

impl Protocol {
    /// What a re-run is judged under: the policy's `uncertain`, and the proxy on a
    /// release before at-most-once leases, if any.
    pub fn policy(&self) -> (Uncertain, Option<u8>) {
        (self.params.filter.uncertain, self.params.unflagged_proxy)
    }
}

impl Model for Protocol {
    type State = World;
    type Action = Step;

    fn init_states(&self) -> Vec<World> {
        let mut world = World::start(&self.params);
        if self.params.mutation == Some(Mutation::GraceOnlyWhileFailing) {
            for replica in &mut world.replicas {
                replica.grace.mutate_hold_only_while_failing();
            }
        }
        if self.params.mutation == Some(Mutation::OutboxDropsOnTransientError) {
            for proxy in &mut world.proxies {
                proxy.outbox.0.mutate_drop_on_transient_error();
            }
        }
        vec![world]
    }

    fn actions(&self, state: &World, actions: &mut Vec<Step>) {
        state.steps(&self.params, actions);
    }

    fn next_state(&self, state: &World, action: Step) -> Option<World> {
        let mut next = state.clone();
        next.take(&self.params, action);
        if self.params.mutation == Some(Mutation::OutboxDropsOnTransientError) {
            for proxy in &mut next.proxies {
                proxy.outbox.0.mutate_drop_on_transient_error();
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties(self.params.filter.uncertain)
    }
}

/// A property's verdict on a state: `Some(why)` when it is violated.
pub type Verdict = fn(&Protocol, &World) -> Option<String>;

/// Every property, by name, as a verdict with a reason (`docs/model.md#properties`).
pub const PROPERTIES: [(&str, Verdict); 7] = [
    ("one execution per operation, beyond the excused", |m, w| {
        w.ghost.unexcused_rerun(m.policy())
    }),
    (
        "no other answer than the operation's own, latest run",
        |_, w| w.ghost.inconsistent_answer(),
    ),
    ("an unknown record never runs again", |_, w| {
        w.ghost.ran_after_unknown()
    }),
    ("a stale fence never settles", |_, w| {
        w.ghost
            .stale_settles
            .first()
            .map(|(call, row)| format!("a settle of claim {call} landed on claim {row}'s record"))
    }),
    (
        "another request's record is never taken within its retention",
        |_, w| w.ghost.conflict_taken(),
    ),
    (
        "every won claim ends settled, released or expired within the bound",
        |m, w| {
            let row = w.db.row.as_ref()?;
            let live = row.state == db::RowState::Pending
                && row.lease_expires_at.is_some_and(|at| at >= w.now);
            let won = w.ghost.claims.iter().find(|c| c.fence == row.fence)?;
            (live && w.now >= won.at + m.params.settle_bound_ms()).then(|| {
                format!(
                    "claim {} won at {} ms still holds a live lease at {} ms",
                    won.fence, won.at, w.now
                )
            })
        },
    ),
    (
        "no fence runs while an earlier fence of the same scope may still commit",
        |_, w| w.ghost.committed_twice(&w.service.committed),
    ),
];

/// The properties, for the checker; the examples the bound must reach depend on the
/// policy's `uncertain`.
pub fn properties(uncertain: Uncertain) -> Vec<Property<Protocol>> {
    let mut properties = vec![
        Property::always(PROPERTIES[0].0, |m, w| PROPERTIES[0].1(m, w).is_none()),
        Property::always(PROPERTIES[1].0, |m, w| PROPERTIES[1].1(m, w).is_none()),
        Property::always(PROPERTIES[2].0, |m, w| PROPERTIES[2].1(m, w).is_none()),
        Property::always(PROPERTIES[3].0, |m, w| PROPERTIES[3].1(m, w).is_none()),
        Property::always(PROPERTIES[4].0, |m, w| PROPERTIES[4].1(m, w).is_none()),
        Property::always(PROPERTIES[5].0, |m, w| PROPERTIES[5].1(m, w).is_none()),
        Property::always(PROPERTIES[6].0, |m, w| PROPERTIES[6].1(m, w).is_none()),
    ];
    if uncertain == Uncertain::Reconcile {
        properties.push(Property::sometimes(
            "a reconciled-committed replay is reachable",
            |_, w: &World| {
                w.ghost.reconciled.iter().any(|&(_, committed, at)| {
                    committed
                        && w.ghost
                            .delivered
                            .iter()
                            .any(|d| d.at >= at && d.execution.is_some())
                })
            },
        ));
        properties.push(Property::sometimes(
            "a reconciled-absent re-run is reachable",
            |m: &Protocol, w: &World| {
                w.ghost.reconciled.iter().any(|&(fence, committed, _)| {
                    !committed && w.ghost.executions.iter().any(|e| e.fence > fence)
                }) && w.ghost.unexcused_rerun(m.policy()).is_none()
            },
        ));
    } else {
        properties.push(Property::sometimes(
            "an excused re-run is reachable",
            |m: &Protocol, w: &World| {
                w.ghost.executions.len() > 1 && w.ghost.unexcused_rerun(m.policy()).is_none()
            },
        ));
        properties.push(Property::sometimes(
            "a record lands through an outbox",
            |_, w: &World| w.ghost.outbox_landed,
        ));
    }
    properties
}
