//! The history checker: a pure function from what a run recorded ([`History`]) to what it
//! means ([`Report`]). No I/O, no clock: every rule below is a unit test over a hand-written
//! history.
//!
//! # What is checked, per key
//!
//! - **Executed twice.** The upstream's log lists each execution with the key, fence, proxy
//!   and caller attempt it came from. Every run after a key's first is a *re-run*, judged
//!   against the execution just before it ([`judge_rerun`]). A re-run is **explained** only
//!   with evidence of the one documented at-least-once case, a proxy that died holding the
//!   claim: the earlier execution came through Envoy X, and Envoy X was killed at or after
//!   the earlier request was sent, before its caller got an answer (if it ever did) and before
//!   the re-run started; and the re-run carries a higher fence than the earlier execution.
//!   The same case seen from the caller is explained too: the earlier execution's first
//!   settle call failed, so Envoy X delivered the answer and handed the record to its
//!   outbox (it logs that hand-off with the claim's fence), and Envoy X was killed before
//!   the outbox delivered it. The caller then holds an answer the record no longer has: for
//!   such a key the divergent answer and the lost record are that case's consequences,
//!   counted in their own row ("answer delivered, record died with its proxy"), not as
//!   failures. Anything else is **unexplained**: a re-run the guarantee does not allow. A
//!   key with at least one unexplained re-run counts as unexplained; a proxy killed after
//!   its caller's answer with no hand-off logged for that claim explains nothing (the
//!   verdict's reason names the late kill, so this case reads apart from the others).
//! - **Divergent answers.** Callers of the same key and body that got two different
//!   successful (2xx) answers: two executions both delivered, which only a proxy that died
//!   with the record in its outbox explains (above).
//! - **Lost records.** After the run, with every fault healed, the key's same-body request is
//!   sent again through each Envoy: every successful answer a caller got must replay with the
//!   same status and body. One that does not (a new execution, a 409, a 503 in progress) is a
//!   *lost record*. A check that could not get through (503 `journal_unavailable`, no
//!   connection, after retries) leaves the key *unverified*, which fails the run as well: a
//!   check that was not made proves nothing.
//!
//! # Attribution to fault kinds
//!
//! A request counts under every fault kind that was active at some point while it ran, or
//! under "no fault"; a key counts under every kind active at some point between its first
//! request's start and its last request's end. So one key or request may appear in several
//! columns; the "all" column counts each once.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::history::{Attempt, Execution, Fault, FaultKind, History, Ms, Outcome, Role};

/// One column of the table: requests and keys that saw no fault, those that saw a fault of
/// one kind, and all of them.
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
            &FaultKind::ALL
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
}

/// The figures of one column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests (caller attempts).
    pub requests: u64,
    /// Keys.
    pub keys: u64,
    /// Keys executed more than once, every re-run explained.
    pub executed_twice_explained: u64,
    /// Keys executed more than once with at least one unexplained re-run.
    pub executed_twice_unexplained: u64,
    /// Keys whose callers got two different successful answers.
    pub divergent: u64,
    /// Keys whose delivered answer died with its proxy's outbox: divergent answers and
    /// lost records that the documented case explains.
    pub delivered_then_lost_with_proxy: u64,
    /// Keys with a delivered answer that no longer replays.
    pub lost_records: u64,
    /// Keys whose after-run check could not be made.
    pub unverified: u64,
    /// Answers that were not a success, by problem code (or `http_<status>`,
    /// `client_gave_up`, `connection_error`).
    pub errors: BTreeMap<String, u64>,
}

/// How a re-run was judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum RerunVerdict {
    /// The documented at-least-once case, with its evidence.
    Explained {
        /// What the dead proxy was holding.
        held: Held,
        /// The Envoy kill (fault id) that cut the earlier execution's request off.
        fault: usize,
        /// The Envoy the earlier execution came through.
        envoy: usize,
        /// The earlier execution's fence.
        earlier_fence: u64,
        /// The re-run's fence (higher).
        later_fence: u64,
    },
    /// Not allowed by the guarantee.
    Unexplained {
        /// Which piece of evidence is missing.
        reason: String,
    },
}

/// What an Envoy killed with a claim was holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// The request itself: killed before its caller got an answer.
    Request,
    /// The record in its outbox: the answer was delivered after the first settle call
    /// failed (the hand-off is in its log), and the proxy died before the outbox landed it.
    RecordInOutbox,
}

/// One execution of a key after its first, judged against the one before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rerun {
    /// The earlier execution's number.
    pub earlier: u64,
    /// The re-run's execution number.
    pub later: u64,
    /// The judgement.
    pub verdict: RerunVerdict,
}

/// A delivered answer that did not replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostRecord {
    /// The Envoy the check asked.
    pub envoy: usize,
    /// The delivered answer (status, body) that did not come back.
    pub delivered: (u16, String),
    /// What came back instead.
    pub replay: Outcome,
}

/// Everything the checker found about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyVerdict {
    /// The key.
    pub key: String,
    /// Its executions' numbers, in order.
    pub executions: Vec<u64>,
    /// Every execution after the first, judged.
    pub reruns: Vec<Rerun>,
    /// The distinct successful answers its callers got, when there was more than one.
    pub divergent_answers: Vec<(u16, String)>,
    /// Delivered answers that did not replay.
    pub lost: Vec<LostRecord>,
    /// The after-run check could not be made for this key.
    pub unverified: bool,
    /// The faults active while its requests ran (fault ids).
    pub faults: Vec<usize>,
}

impl KeyVerdict {
    /// Executed more than once with a re-run the guarantee does not allow.
    pub fn unexplained(&self) -> bool {
        self.reruns
            .iter()
            .any(|rerun| matches!(rerun.verdict, RerunVerdict::Unexplained { .. }))
    }

    /// Executed more than once, every re-run explained.
    pub fn explained(&self) -> bool {
        !self.reruns.is_empty() && !self.unexplained()
    }

    /// Every re-run explained, and one of them by a proxy that died with the record in
    /// its outbox after delivering the answer: divergent answers and lost records are that
    /// case's consequences.
    pub fn answer_died_with_proxy(&self) -> bool {
        self.explained()
            && self.reruns.iter().any(|rerun| {
                matches!(
                    rerun.verdict,
                    RerunVerdict::Explained {
                        held: Held::RecordInOutbox,
                        ..
                    }
                )
            })
    }

    /// Divergent answers or lost records that no documented case explains.
    fn unexplained_delivery(&self) -> bool {
        (!self.divergent_answers.is_empty() || !self.lost.is_empty())
            && !self.answer_died_with_proxy()
    }

    /// Anything that fails the run.
    pub fn fails(&self) -> bool {
        self.unexplained() || self.unexplained_delivery() || self.unverified
    }
}

/// The checker's findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Figures per column, in [`Column::all`] order.
    pub columns: Vec<(Column, Counts)>,
    /// Every key, in key order.
    pub keys: Vec<KeyVerdict>,
}

impl Report {
    /// The figures of the "all" column.
    pub fn total(&self) -> Counts {
        self.columns
            .iter()
            .find(|(column, _)| *column == Column::All)
            .map(|(_, counts)| counts.clone())
            .unwrap_or_default()
    }

    /// Whether the run failed: any unexplained re-run, divergent answer, lost record or
    /// unverified key.
    pub fn failed(&self) -> bool {
        self.keys.iter().any(KeyVerdict::fails)
    }
}

/// Checks a run's history.
pub fn check(history: &History) -> Report {
    let attempts_by_id: HashMap<&str, &Attempt> = history
        .attempts
        .iter()
        .map(|attempt| (attempt.id.as_str(), attempt))
        .collect();
    let mut attempts_by_key: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for attempt in &history.attempts {
        attempts_by_key
            .entry(&attempt.key)
            .or_default()
            .push(attempt);
    }
    // The replay checks' own executions count too: a record that died with its proxy may
    // be re-run first by the check, and that re-run is judged like any other.
    let mut executions_by_key: BTreeMap<&str, Vec<&Execution>> = BTreeMap::new();
    for execution in history
        .executions
        .iter()
        .chain(&history.verification_executions)
    {
        if let Some(key) = &execution.key {
            executions_by_key.entry(key).or_default().push(execution);
        }
    }
    let keys: BTreeSet<&str> = attempts_by_key
        .keys()
        .chain(executions_by_key.keys())
        .copied()
        .collect();

    let verdicts: Vec<KeyVerdict> = keys
        .into_iter()
        .map(|key| {
            let attempts = attempts_by_key.get(key).map_or(&[][..], Vec::as_slice);
            let executions = executions_by_key.get(key).map_or(&[][..], Vec::as_slice);
            judge_key(key, attempts, executions, history, &attempts_by_id)
        })
        .collect();

    let columns = Column::all(history.replicated_postgres)
        .into_iter()
        .map(|column| (column, counts(column, history, &verdicts)))
        .collect();
    Report {
        columns,
        keys: verdicts,
    }
}

fn judge_key(
    key: &str,
    attempts: &[&Attempt],
    executions: &[&Execution],
    history: &History,
    attempts_by_id: &HashMap<&str, &Attempt>,
) -> KeyVerdict {
    let mut executions = executions.to_vec();
    executions.sort_by_key(|execution| execution.execution);
    let reruns = executions
        .windows(2)
        .map(|pair| Rerun {
            earlier: pair[0].execution,
            later: pair[1].execution,
            verdict: judge_rerun(pair[0], pair[1], attempts_by_id, history),
        })
        .collect();

    let delivered = delivered_answers(attempts);
    let divergent_answers = if delivered.len() > 1 {
        delivered.iter().cloned().collect()
    } else {
        Vec::new()
    };
    let checks: Vec<_> = history
        .verifications
        .iter()
        .filter(|verification| verification.key == key)
        .collect();
    let unverified = !delivered.is_empty()
        && (checks.is_empty() || checks.iter().any(|check| check.outcome.unavailable()));
    let lost = checks
        .iter()
        .filter(|check| !check.outcome.unavailable())
        .flat_map(|check| {
            delivered
                .iter()
                .filter(|answer| check.outcome.success() != Some((answer.0, answer.1.as_str())))
                .map(|answer| LostRecord {
                    envoy: check.envoy,
                    delivered: answer.clone(),
                    replay: check.outcome.clone(),
                })
        })
        .collect();

    KeyVerdict {
        key: key.to_owned(),
        executions: executions
            .iter()
            .map(|execution| execution.execution)
            .collect(),
        reruns,
        divergent_answers,
        lost,
        unverified,
        faults: key_faults(attempts, &history.faults),
    }
}

/// Judges execution `later` of a key against the execution just before it, `earlier`: is
/// the re-run the documented at-least-once case (see the module doc)?
pub fn judge_rerun(
    earlier: &Execution,
    later: &Execution,
    attempts_by_id: &HashMap<&str, &Attempt>,
    history: &History,
) -> RerunVerdict {
    let faults = &history.faults;
    let unexplained = |reason: String| RerunVerdict::Unexplained { reason };
    let Some(attempt) = earlier
        .caller_request_id
        .as_deref()
        .and_then(|id| attempts_by_id.get(id))
    else {
        return unexplained(format!(
            "execution {} names no known caller request",
            earlier.execution
        ));
    };
    let Some(envoy) = earlier.via else {
        return unexplained(format!(
            "execution {} does not say which Envoy forwarded it",
            earlier.execution
        ));
    };
    let (Some(earlier_fence), Some(later_fence)) = (earlier.fence, later.fence) else {
        return unexplained(format!(
            "execution {} or {} carries no fence",
            earlier.execution, later.execution
        ));
    };
    if later_fence <= earlier_fence {
        return unexplained(format!(
            "the re-run's fence {later_fence} is not above the earlier {earlier_fence}"
        ));
    }
    // Cut off before its caller got an answer, or it had none.
    let cut_off_before = attempt
        .answered_at()
        .map_or(later.at_ms, |answered| answered.min(later.at_ms));
    let kill = faults.iter().find(|fault| {
        fault.kind == FaultKind::EnvoyKill
            && fault.target == envoy
            && attempt.start_ms <= fault.start_ms
            && fault.start_ms < cut_off_before
    });
    let explained = |held: Held, fault: &Fault| RerunVerdict::Explained {
        held,
        fault: fault.id,
        envoy,
        earlier_fence,
        later_fence,
    };
    if let Some(fault) = kill {
        return explained(Held::Request, fault);
    }
    // Killed after its caller's answer, before the re-run. That explains the re-run only
    // if the record was still in the proxy's outbox: the hand-off it logged names the fence.
    let late_kill = faults.iter().find(|fault| {
        fault.kind == FaultKind::EnvoyKill
            && fault.target == envoy
            && attempt.start_ms <= fault.start_ms
            && fault.start_ms < later.at_ms
    });
    let handed_off = history
        .handoffs
        .iter()
        .any(|handoff| handoff.envoy == envoy && handoff.fence == earlier_fence);
    match late_kill {
        Some(fault) if handed_off => explained(Held::RecordInOutbox, fault),
        _ => {
            let mut reason = format!(
                "envoy-{envoy}, which forwarded execution {} (request {}), was not killed \
                 between that request's start and {}",
                earlier.execution,
                attempt.id,
                match attempt.answered_at() {
                    Some(_) => "its answer",
                    None => "the re-run",
                }
            );
            if let (Some(fault), Some(answered)) = (late_kill, attempt.answered_at()) {
                reason.push_str(&format!(
                    " (it was killed at {} ms, after its caller got the answer at {answered} ms \
                     and before the re-run at {} ms, but logged no outbox hand-off of fence \
                     {earlier_fence}: its record should have been written)",
                    fault.start_ms, later.at_ms
                ));
            }
            unexplained(reason)
        }
    }
}

/// The distinct successful answers the key's same-body callers got.
fn delivered_answers(attempts: &[&Attempt]) -> BTreeSet<(u16, String)> {
    attempts
        .iter()
        .filter(|attempt| attempt.role != Role::Conflict)
        .filter_map(|attempt| attempt.outcome.success())
        .map(|(status, body)| (status, body.to_owned()))
        .collect()
}

/// The faults active between the key's first request's start and its last request's end.
fn key_faults(attempts: &[&Attempt], faults: &[Fault]) -> Vec<usize> {
    let (Some(start), Some(end)) = (
        attempts.iter().map(|a| a.start_ms).min(),
        attempts.iter().map(|a| a.end_ms).max(),
    ) else {
        return Vec::new();
    };
    overlapping(faults, start, end)
}

fn overlapping(faults: &[Fault], start: Ms, end: Ms) -> Vec<usize> {
    faults
        .iter()
        .filter(|fault| fault.overlaps(start, end))
        .map(|fault| fault.id)
        .collect()
}

/// Whether something active during the faults `ids` counts in `column`.
fn in_column(column: Column, ids: &[usize], faults: &[Fault]) -> bool {
    match column {
        Column::All => true,
        Column::NoFault => ids.is_empty(),
        Column::Fault(kind) => ids
            .iter()
            .filter_map(|id| faults.get(*id))
            .any(|fault| fault.kind == kind),
    }
}

fn counts(column: Column, history: &History, verdicts: &[KeyVerdict]) -> Counts {
    let mut counts = Counts::default();
    for attempt in &history.attempts {
        let ids = overlapping(&history.faults, attempt.start_ms, attempt.end_ms);
        if !in_column(column, &ids, &history.faults) {
            continue;
        }
        counts.requests += 1;
        if let Some(label) = attempt.outcome.error_label() {
            *counts.errors.entry(label).or_default() += 1;
        }
    }
    for verdict in verdicts {
        if !in_column(column, &verdict.faults, &history.faults) {
            continue;
        }
        counts.keys += 1;
        counts.executed_twice_explained += u64::from(verdict.explained());
        counts.executed_twice_unexplained += u64::from(verdict.unexplained());
        let explained_loss = verdict.answer_died_with_proxy()
            && (!verdict.divergent_answers.is_empty() || !verdict.lost.is_empty());
        counts.delivered_then_lost_with_proxy += u64::from(explained_loss);
        counts.divergent += u64::from(!verdict.divergent_answers.is_empty() && !explained_loss);
        counts.lost_records += u64::from(!verdict.lost.is_empty() && !explained_loss);
        counts.unverified += u64::from(verdict.unverified);
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Handoff, Verification};

    const BODY: &str = "sha256:aa";

    fn attempt(id: &str, key: &str, envoy: usize, start: Ms, end: Ms, outcome: Outcome) -> Attempt {
        Attempt {
            id: id.to_owned(),
            key: key.to_owned(),
            caller: format!("{id}-caller"),
            role: Role::First,
            attempt: 0,
            envoy,
            body_sha256: BODY.to_owned(),
            timeout_ms: 8000,
            start_ms: start,
            end_ms: end,
            outcome,
        }
    }

    fn created(body: &str) -> Outcome {
        Outcome::Answered {
            status: 201,
            body: body.to_owned(),
            replayed: false,
            problem_code: None,
        }
    }

    fn problem(status: u16, code: &str) -> Outcome {
        Outcome::Answered {
            status,
            body: format!("{{\"code\":\"{code}\"}}"),
            replayed: false,
            problem_code: Some(code.to_owned()),
        }
    }

    fn execution(n: u64, key: &str, at: Ms, fence: u64, via: usize, request: &str) -> Execution {
        Execution {
            execution: n,
            at_ms: at,
            path: "/payments".to_owned(),
            key: Some(key.to_owned()),
            fence: Some(fence),
            body_sha256: BODY.to_owned(),
            via: Some(via),
            caller_request_id: Some(request.to_owned()),
        }
    }

    fn envoy_kill(id: usize, envoy: usize, start: Ms, end: Ms) -> Fault {
        Fault {
            id,
            kind: FaultKind::EnvoyKill,
            target: envoy,
            start_ms: start,
            end_ms: end,
            failover_window_ms: None,
        }
    }

    fn verified(key: &str, envoy: usize, outcome: Outcome) -> Verification {
        Verification {
            key: key.to_owned(),
            envoy,
            outcome,
            tries: 1,
        }
    }

    /// A killed winner and its recovery: k's first request went through envoy 0 at 0 ms,
    /// executed at 10 ms with fence 1, envoy 0 died at 500 ms (the caller got no answer); a
    /// retry through envoy 1 re-ran it with fence 2 at 3600 ms and got 201 `B`.
    fn killed_winner_history() -> History {
        History {
            faults: vec![envoy_kill(0, 0, 500, 1800)],
            attempts: vec![
                attempt(
                    "r1",
                    "k",
                    0,
                    0,
                    500,
                    Outcome::ConnectionError {
                        error: "reset".into(),
                    },
                ),
                attempt("r2", "k", 1, 3500, 3700, created("B")),
            ],
            executions: vec![
                execution(1, "k", 10, 1, 0, "r1"),
                execution(2, "k", 3600, 2, 1, "r2"),
            ],
            verifications: vec![
                verified("k", 0, created("B")),
                verified("k", 1, created("B")),
            ],
            verification_executions: Vec::new(),
            handoffs: Vec::new(),
            replicated_postgres: false,
        }
    }

    fn only_key(report: &Report) -> &KeyVerdict {
        assert_eq!(report.keys.len(), 1, "{report:#?}");
        &report.keys[0]
    }

    #[test]
    fn a_single_execution_with_a_replaying_answer_passes() {
        let history = History {
            attempts: vec![
                attempt("r1", "k", 0, 0, 100, created("A")),
                attempt("r2", "k", 1, 5, 110, created("A")),
            ],
            executions: vec![execution(1, "k", 10, 1, 0, "r1")],
            verifications: vec![
                verified("k", 0, created("A")),
                verified("k", 1, created("A")),
            ],
            ..History::default()
        };
        let report = check(&history);
        let key = only_key(&report);
        assert!(key.reruns.is_empty() && !key.fails(), "{key:#?}");
        assert!(!report.failed());
        let total = report.total();
        assert_eq!((total.requests, total.keys), (2, 1));
        assert_eq!(
            total.executed_twice_explained + total.executed_twice_unexplained,
            0
        );
    }

    #[test]
    fn a_rerun_after_the_winners_envoy_was_killed_is_explained() {
        let report = check(&killed_winner_history());
        let key = only_key(&report);
        assert_eq!(
            key.reruns,
            vec![Rerun {
                earlier: 1,
                later: 2,
                verdict: RerunVerdict::Explained {
                    held: Held::Request,
                    fault: 0,
                    envoy: 0,
                    earlier_fence: 1,
                    later_fence: 2,
                },
            }]
        );
        assert!(!report.failed(), "{report:#?}");
        let total = report.total();
        assert_eq!(
            (
                total.executed_twice_explained,
                total.executed_twice_unexplained
            ),
            (1, 0)
        );
    }

    #[test]
    fn a_rerun_without_a_kill_is_unexplained() {
        let mut history = killed_winner_history();
        history.faults.clear();
        let report = check(&history);
        assert!(only_key(&report).unexplained());
        assert!(report.failed());
        assert_eq!(report.total().executed_twice_unexplained, 1);
    }

    #[test]
    fn a_kill_of_the_other_envoy_explains_nothing() {
        let mut history = killed_winner_history();
        history.faults = vec![envoy_kill(0, 1, 500, 1800)];
        assert!(only_key(&check(&history)).unexplained());
    }

    #[test]
    fn a_kill_after_the_caller_got_its_answer_explains_nothing() {
        let mut history = killed_winner_history();
        // The earlier request was answered at 400 ms; the kill at 500 ms came too late.
        history.attempts[0].end_ms = 400;
        history.attempts[0].outcome = created("A");
        let report = check(&history);
        let key = only_key(&report);
        assert!(key.unexplained(), "{key:#?}");
        match &key.reruns[0].verdict {
            RerunVerdict::Unexplained { reason } => assert!(
                reason.contains("killed at 500 ms, after its caller got the answer at 400 ms"),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        // And the delivered `A` no longer replays (the record is the re-run's `B`).
        assert_eq!(key.lost.len(), 2, "{key:#?}");
        assert_eq!(
            key.divergent_answers.len(),
            2,
            "A and B were both delivered"
        );
    }

    /// The answer was delivered at 400 ms after the first finalize failed, the record
    /// went to envoy 0's outbox (logged with fence 1), and envoy 0 was killed at 500 ms.
    fn delivered_then_killed_history() -> History {
        let mut history = killed_winner_history();
        history.attempts[0].end_ms = 400;
        history.attempts[0].outcome = created("A");
        history.handoffs = vec![Handoff { envoy: 0, fence: 1 }];
        history
    }

    #[test]
    fn a_proxy_killed_with_the_record_in_its_outbox_explains_the_rerun_and_the_lost_answer() {
        let report = check(&delivered_then_killed_history());
        let key = only_key(&report);
        assert!(
            matches!(
                key.reruns[0].verdict,
                RerunVerdict::Explained {
                    held: Held::RecordInOutbox,
                    fault: 0,
                    ..
                }
            ),
            "{key:#?}"
        );
        assert!(key.answer_died_with_proxy());
        assert!(!key.fails(), "{key:#?}");
        assert!(!report.failed());
        let total = report.total();
        assert_eq!(
            (
                total.executed_twice_explained,
                total.delivered_then_lost_with_proxy,
                total.divergent,
                total.lost_records
            ),
            (1, 1, 0, 0),
            "divergence and loss are the explained case's, counted apart"
        );
    }

    #[test]
    fn a_record_that_died_with_its_proxy_may_first_be_re_run_by_the_replay_check() {
        // Nobody retried k during the run; the after-run check ran it again (fence 2).
        let mut history = delivered_then_killed_history();
        history.attempts.truncate(1);
        let rerun = history.executions.remove(1);
        history.verification_executions = vec![rerun];
        let report = check(&history);
        let key = only_key(&report);
        assert!(
            matches!(
                key.reruns[..],
                [Rerun {
                    verdict: RerunVerdict::Explained {
                        held: Held::RecordInOutbox,
                        ..
                    },
                    ..
                }]
            ),
            "{key:#?}"
        );
        assert!(!report.failed(), "{report:#?}");
        assert_eq!(report.total().delivered_then_lost_with_proxy, 1);
        // Without the hand-off in the Envoy's log the same history fails.
        history.handoffs.clear();
        assert!(check(&history).failed());
    }

    #[test]
    fn a_hand_off_of_another_claim_or_by_the_other_envoy_explains_nothing() {
        for handoff in [
            Handoff { envoy: 0, fence: 7 },
            Handoff { envoy: 1, fence: 1 },
        ] {
            let mut history = delivered_then_killed_history();
            history.handoffs = vec![handoff];
            let report = check(&history);
            assert!(only_key(&report).unexplained(), "{handoff:?}");
            assert!(report.failed());
        }
    }

    #[test]
    fn a_hand_off_without_a_kill_explains_nothing() {
        let mut history = delivered_then_killed_history();
        history.faults.clear();
        let report = check(&history);
        assert!(only_key(&report).unexplained());
        assert!(report.failed());
        assert_eq!(report.total().divergent, 1);
    }

    #[test]
    fn hand_offs_are_read_from_the_filters_log_line() {
        let log = "[2026-12-01 09:16:03.149][31638][warning][wasm] wasm log keyflight keyflight: \
                   keyflight: scope 59c5 fence 41: finalize failed: answered with HTTP 503; \
                   delivering the response, the outbox keeps the lease and retries\n\
                   [2026-12-01 09:16:04.000][31638][info][wasm] keyflight: scope 59c5 fence 41: other\n";
        assert_eq!(
            crate::history::handoffs_in_log(1, log),
            vec![Handoff {
                envoy: 1,
                fence: 41
            }]
        );
    }

    #[test]
    fn a_kill_before_the_request_was_sent_explains_nothing() {
        let mut history = killed_winner_history();
        history.faults = vec![envoy_kill(0, 0, -300, -100)];
        assert!(only_key(&check(&history)).unexplained());
    }

    #[test]
    fn a_kill_after_the_rerun_started_explains_nothing() {
        let mut history = killed_winner_history();
        history.faults = vec![envoy_kill(0, 0, 3650, 4000)];
        assert!(only_key(&check(&history)).unexplained());
    }

    #[test]
    fn a_rerun_whose_fence_did_not_increase_is_unexplained() {
        let mut history = killed_winner_history();
        history.executions[1].fence = Some(1);
        let key = check(&history).keys.remove(0);
        match &key.reruns[0].verdict {
            RerunVerdict::Unexplained { reason } => assert!(reason.contains("fence"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_execution_without_its_caller_request_is_unexplained() {
        let mut history = killed_winner_history();
        history.executions[0].caller_request_id = None;
        assert!(only_key(&check(&history)).unexplained());
        let mut history = killed_winner_history();
        history.executions[0].via = None;
        assert!(only_key(&check(&history)).unexplained());
    }

    #[test]
    fn a_caller_that_gave_up_explains_nothing_by_itself() {
        // The caller left (client timeout) while the upstream ran; a later retry re-ran it.
        let history = History {
            attempts: vec![
                attempt("r1", "k", 0, 0, 300, Outcome::GaveUp),
                attempt("r2", "k", 1, 3500, 3700, created("B")),
            ],
            executions: vec![
                execution(1, "k", 10, 1, 0, "r1"),
                execution(2, "k", 3600, 2, 1, "r2"),
            ],
            verifications: vec![
                verified("k", 0, created("B")),
                verified("k", 1, created("B")),
            ],
            ..History::default()
        };
        assert!(check(&history).failed());
    }

    #[test]
    fn two_different_successful_answers_are_divergent() {
        let history = History {
            attempts: vec![
                attempt("r1", "k", 0, 0, 100, created("A")),
                attempt("r2", "k", 1, 200, 300, created("B")),
            ],
            executions: vec![
                execution(1, "k", 10, 1, 0, "r1"),
                execution(2, "k", 210, 2, 1, "r2"),
            ],
            verifications: vec![
                verified("k", 0, created("B")),
                verified("k", 1, created("B")),
            ],
            ..History::default()
        };
        let report = check(&history);
        let key = only_key(&report);
        assert_eq!(key.divergent_answers.len(), 2);
        assert_eq!(report.total().divergent, 1);
        assert_eq!(report.total().lost_records, 1, "A does not replay");
    }

    #[test]
    fn a_conflicting_body_answer_is_not_a_divergent_answer() {
        let mut conflict = attempt("r3", "k", 0, 200, 210, problem(409, "idempotency_conflict"));
        conflict.role = Role::Conflict;
        let history = History {
            attempts: vec![attempt("r1", "k", 0, 0, 100, created("A")), conflict],
            executions: vec![execution(1, "k", 10, 1, 0, "r1")],
            verifications: vec![
                verified("k", 0, created("A")),
                verified("k", 1, created("A")),
            ],
            ..History::default()
        };
        let report = check(&history);
        assert!(!report.failed(), "{report:#?}");
        assert_eq!(report.total().errors.get("idempotency_conflict"), Some(&1));
    }

    #[test]
    fn a_delivered_answer_that_runs_again_on_the_check_is_lost() {
        let history = History {
            attempts: vec![attempt("r1", "k", 0, 0, 100, created("A"))],
            executions: vec![execution(1, "k", 10, 1, 0, "r1")],
            verifications: vec![
                verified("k", 0, created("C")),
                verified("k", 1, created("C")),
            ],
            ..History::default()
        };
        let report = check(&history);
        let key = only_key(&report);
        assert_eq!(key.lost.len(), 2);
        assert_eq!(key.lost[0].delivered, (201, "A".to_owned()));
        assert_eq!(report.total().lost_records, 1);
        assert!(report.failed());
    }

    #[test]
    fn a_check_that_cannot_reach_the_store_leaves_the_key_unverified() {
        let history = History {
            attempts: vec![attempt("r1", "k", 0, 0, 100, created("A"))],
            executions: vec![execution(1, "k", 10, 1, 0, "r1")],
            verifications: vec![
                verified("k", 0, problem(503, "journal_unavailable")),
                verified("k", 1, created("A")),
            ],
            ..History::default()
        };
        let report = check(&history);
        let key = only_key(&report);
        assert!(key.unverified && key.lost.is_empty(), "{key:#?}");
        assert!(report.failed());
        // A key nobody got an answer for needs no check.
        let history = History {
            attempts: vec![attempt(
                "r1",
                "k",
                0,
                0,
                100,
                problem(503, "journal_unavailable"),
            )],
            ..History::default()
        };
        assert!(!check(&history).failed());
    }

    #[test]
    fn requests_and_keys_count_under_every_fault_kind_they_overlapped() {
        let freeze = Fault {
            id: 1,
            kind: FaultKind::StoreFreeze,
            target: 1,
            start_ms: 3000,
            end_ms: 3400,
            failover_window_ms: None,
        };
        let mut history = killed_winner_history();
        history.faults.push(freeze);
        history
            .attempts
            .push(attempt("r9", "quiet", 0, 10_000, 10_100, created("Q")));
        history
            .executions
            .push(execution(3, "quiet", 10_010, 3, 0, "r9"));
        history
            .verifications
            .push(verified("quiet", 0, created("Q")));
        history
            .verifications
            .push(verified("quiet", 1, created("Q")));
        let report = check(&history);
        let column = |c: Column| {
            report
                .columns
                .iter()
                .find(|(column, _)| *column == c)
                .map(|(_, counts)| counts.clone())
                .expect("every column")
        };
        let kill = column(Column::Fault(FaultKind::EnvoyKill));
        assert_eq!(
            (kill.requests, kill.keys, kill.executed_twice_explained),
            (1, 1, 1)
        );
        assert_eq!(kill.errors.get("connection_error"), Some(&1));
        let freeze = column(Column::Fault(FaultKind::StoreFreeze));
        assert_eq!(
            (freeze.requests, freeze.keys),
            (0, 1),
            "r2 began after the freeze"
        );
        let none = column(Column::NoFault);
        assert_eq!((none.requests, none.keys), (2, 1));
        let all = column(Column::All);
        assert_eq!((all.requests, all.keys), (3, 2));
    }
}
