//! Running a check and reading its result: states explored, depth reached, each
//! property's verdict, and a counterexample trace for each violation
//! (`docs/model.md#reading-a-counterexample`).

use std::fmt::Write as _;

use stateright::{Checker, HasDiscoveries, Model, Path};

use crate::world::{From, Request, Step, Wire, World};
use crate::{PROPERTIES, Params, Protocol};

/// What a check found.
pub struct Report {
    /// States generated.
    pub states: usize,
    /// Distinct states.
    pub unique: usize,
    /// The deepest path explored (steps).
    pub depth: usize,
    /// The `always` properties that were violated, each with its shortest path.
    pub violations: Vec<(&'static str, Path<World, Step>)>,
    /// The `sometimes` properties no state showed.
    pub unreached: Vec<&'static str>,
}

/// Explores every state of `params` breadth first on `threads` threads; with
/// `first_violation`, stops at the first violated property (a mutation's check).
pub fn check(params: Params, threads: usize, first_violation: bool) -> Report {
    let model = Protocol { params };
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let finish = if first_violation {
        HasDiscoveries::AnyFailures
    } else {
        HasDiscoveries::All
    };
    let checker = model
        .checker()
        .threads(threads)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    let discoveries = checker.discoveries();
    let always: Vec<&'static str> = PROPERTIES.iter().map(|(name, _)| *name).collect();
    Report {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        violations: always
            .iter()
            .filter_map(|name| discoveries.get(name).map(|path| (*name, path.clone())))
            .collect(),
        unreached: names
            .into_iter()
            .filter(|name| !always.contains(name) && !discoveries.contains_key(name))
            .collect(),
    }
}

fn request(r: &Request) -> String {
    let from = match r.from {
        From::Stream { client, attempt } => format!("stream c{client}#{attempt}"),
        From::Outbox { claim, renew: true } => format!("outbox renew of claim {claim}"),
        From::Outbox {
            claim,
            renew: false,
        } => format!("outbox settle of claim {claim}"),
    };
    let call = match &r.call {
        Wire::Claim { .. } => "claim".to_owned(),
        Wire::Renew { claim, .. } => format!("renew {claim}"),
        Wire::Settle { claim, settle } => format!("settle {claim} {settle:?}"),
        Wire::Reconciled {
            fence,
            committed: Some(answer),
            ..
        } => format!(
            "reconciled {fence} committed {} {:?}",
            answer.status, answer.body
        ),
        Wire::Reconciled { fence, .. } => format!("reconciled {fence} absent"),
        Wire::Question { fence, .. } => format!("question about fence {fence}"),
    };
    format!(
        "P{} {from}: {call} (sent {} ms, {:?}{})",
        r.proxy,
        r.sent_at,
        r.waiter,
        if r.delayed { ", delayed" } else { "" }
    )
}

/// One step, in a line.
pub fn describe(step: &Step) -> String {
    match step {
        Step::Serve {
            request: r, fault, ..
        } if matches!(r.call, Wire::Question { .. }) => {
            format!("the service answers [{}] {fault:?}", request(r))
        }
        Step::Serve {
            request: r,
            replica,
            fault,
        } => format!("R{replica} serves [{}] {fault:?}", request(r)),
        Step::Lose { request: r } => format!("LOST [{}]", request(r)),
        Step::Delay { request: r } => format!("DELAYED [{}]", request(r)),
        Step::Drop { request: r } => format!("dropped [{}]", request(r)),
        other => format!("{other:?}"),
    }
}

/// A counterexample as lines a person can follow: the clock, each step, and what
/// the database and the ghost evidence look like after it; then the verdict.
pub fn trace(params: &Params, name: &str, path: &Path<World, Step>) -> String {
    let mut out = String::new();
    let model = Protocol {
        params: params.clone(),
    };
    for (state, step) in path.clone().into_vec() {
        let Some(step) = step else { continue };
        let _ = writeln!(out, "  t={:>5} ms  {}", state.now, describe(&step));
    }
    let last = path.last_state();
    let _ = writeln!(out, "  final row: {:?}", last.db.row);
    let _ = writeln!(out, "  claims: {:?}", last.ghost.claims);
    let _ = writeln!(out, "  executions: {:?}", last.ghost.executions);
    let _ = writeln!(out, "  delivered: {:?}", last.ghost.delivered);
    if last.service != Default::default() {
        let _ = writeln!(out, "  service: {:?}", last.service);
    }
    if let Some((_, verdict)) = PROPERTIES.iter().find(|(n, _)| *n == name) {
        let _ = writeln!(
            out,
            "  violated: {name}: {}",
            verdict(&model, last).unwrap_or_default()
        );
    }
    out
}
