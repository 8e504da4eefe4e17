//! The judge's findings summed up: one [`Counts`] per column of the table (no fault, each
//! fault kind, all), and every key's verdict. Attribution: a request counts under every
//! fault kind active at some point while it ran, or under "no fault"; a key under every
//! kind active between its first request's start and its last request's end. So one key
//! or request may appear in several columns; the "all" column counts each once.

use std::collections::BTreeMap;

use serde::Serialize;

use super::verdict::KeyVerdict;
use crate::history::{Attempt, Fault, FaultKind, History, Ms};

/// One column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Column {
    /// Active while no fault was.
    NoFault,
    /// Active while a fault of this kind was.
    Fault(FaultKind),
    /// Everything.
    All,
}

impl Column {
    /// Every column, in table order: the primary-node-death column only for a run on a
    /// replicated Postgres.
    pub fn all(replicated_postgres: bool) -> Vec<Column> {
        let kinds: &[FaultKind] = if replicated_postgres {
            &FaultKind::REPLICATED_POSTGRES
        } else {
            &FaultKind::SINGLE_POSTGRES
        };
        let mut columns = vec![Column::NoFault];
        columns.extend(kinds.iter().copied().map(Column::Fault));
        columns.push(Column::All);
        columns
    }

    /// The column's heading.
    pub fn name(self) -> &'static str {
        match self {
            Column::NoFault => "no fault",
            Column::Fault(kind) => kind.name(),
            Column::All => "all",
        }
    }

    /// Whether something active during the faults `ids` counts here.
    fn holds(self, ids: &[usize], faults: &[Fault]) -> bool {
        match self {
            Column::All => true,
            Column::NoFault => ids.is_empty(),
            Column::Fault(kind) => ids
                .iter()
                .filter_map(|id| faults.get(*id))
                .any(|fault| fault.kind == kind),
        }
    }
}

/// The figures of one column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests (caller attempts).
    pub requests: u64,
    /// Keys.
    pub keys: u64,
    /// Keys executed more than once, every re-run excused by a row of the guarantee.
    pub executed_twice_excused: u64,
    /// Keys executed more than once with at least one re-run no row excuses.
    pub executed_twice_unexcused: u64,
    /// Keys with a delivered answer whose record was lost with its proxy's outbox: the
    /// proxy died, or was cut off until its lease ran out (excused).
    pub delivered_then_lost_with_proxy: u64,
    /// Keys whose callers got two different successful answers beyond those.
    pub divergent: u64,
    /// Keys whose record did not answer as it must after the run.
    pub lost_records: u64,
    /// Keys that ran again after a caller saw their record `unknown`.
    pub ran_after_unknown: u64,
    /// Keys of a hold policy run again after the upstream's log shows their first run
    /// committed (certain doubles).
    pub certain_doubles: u64,
    /// Keys whose after-run check could not be made.
    pub unverified: u64,
    /// Answers that were not a success, by problem code (or `http_<status>`,
    /// `client_gave_up`, `connection_error`).
    pub errors: BTreeMap<String, u64>,
}

/// The judge's findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Figures per column, in [`Column::all`] order.
    pub columns: Vec<(Column, Counts)>,
    /// Every key, in key order.
    pub keys: Vec<KeyVerdict>,
}

impl Report {
    /// Sums up `keys`.
    pub fn new(history: &History, keys: Vec<KeyVerdict>) -> Report {
        let columns = Column::all(history.replicated_postgres)
            .into_iter()
            .map(|column| (column, counts(column, history, &keys)))
            .collect();
        Report { columns, keys }
    }

    /// The figures of the "all" column.
    pub fn total(&self) -> Counts {
        self.columns
            .iter()
            .find(|(column, _)| *column == Column::All)
            .map(|(_, counts)| counts.clone())
            .unwrap_or_default()
    }

    /// Whether the run failed: any key with a finding no row excuses.
    pub fn failed(&self) -> bool {
        self.keys.iter().any(KeyVerdict::fails)
    }
}

fn counts(column: Column, history: &History, verdicts: &[KeyVerdict]) -> Counts {
    let mut counts = Counts::default();
    for attempt in &history.attempts {
        let ids = overlapping(&history.faults, attempt.start_ms, attempt.end_ms);
        if !column.holds(&ids, &history.faults) {
            continue;
        }
        counts.requests += 1;
        if let Some(label) = attempt.outcome.error_label() {
            *counts.errors.entry(label).or_default() += 1;
        }
    }
    for verdict in verdicts {
        if !column.holds(&verdict.faults, &history.faults) {
            continue;
        }
        counts.keys += 1;
        counts.executed_twice_excused += u64::from(verdict.excused());
        counts.executed_twice_unexcused += u64::from(verdict.unexcused());
        counts.delivered_then_lost_with_proxy += u64::from(!verdict.died_with_proxy.is_empty());
        counts.divergent += u64::from(!verdict.divergent_answers.is_empty());
        counts.lost_records += u64::from(!verdict.lost.is_empty());
        counts.ran_after_unknown += u64::from(!verdict.ran_after_unknown.is_empty());
        counts.certain_doubles += u64::from(!verdict.certain_doubles.is_empty());
        counts.unverified += u64::from(verdict.unverified);
    }
    counts
}

/// The faults active between the key's first request's start and its last request's end.
pub(super) fn key_faults(attempts: &[&Attempt], faults: &[Fault]) -> Vec<usize> {
    let (Some(start), Some(end)) = (
        attempts.iter().map(|a| a.start_ms).min(),
        attempts.iter().map(|a| a.end_ms).max(),
    ) else {
        return Vec::new();
    };
    overlapping(faults, start, end)
}

/// The ids of the faults active at some point of `[start, end]`.
fn overlapping(faults: &[Fault], start: Ms, end: Ms) -> Vec<usize> {
    faults
        .iter()
        .filter(|fault| fault.overlaps(start, end))
        .map(|fault| fault.id)
        .collect()
}
