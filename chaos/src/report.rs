//! What a run prints and writes: one table on stdout, and under the run's directory
//! `report.json` (the checker's findings: the table's figures and every key's verdict with
//! its evidence) and `history.json` (the plan and everything recorded, to investigate a
//! failure or re-check it).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::checker::setting_name;
use crate::checker::{CooldownCause, Counts, KeyVerdict, Report, RerunVerdict, Row};
use crate::history::{FaultKind, History};
use crate::plan::Plan;

/// How many failing keys the summary names (all are in `report.json`).
const FAILING_KEYS_SHOWN: usize = 10;

/// The table: one row per figure, one column per fault kind (plus "no fault" and "all").
pub fn table(report: &Report) -> String {
    let mut rows: Vec<(String, Vec<u64>)> = vec![
        row(report, "requests", |c| c.requests),
        row(report, "keys", |c| c.keys),
        row(report, "executed twice, excused", |c| {
            c.executed_twice_excused
        }),
        row(report, "executed twice, UNEXCUSED", |c| {
            c.executed_twice_unexcused
        }),
        row(
            report,
            "answer delivered, record lost with its proxy",
            |c| c.delivered_then_lost_with_proxy,
        ),
        row(report, "divergent answers", |c| c.divergent),
        row(report, "lost records", |c| c.lost_records),
        row(report, "certain doubles (hold, reconcile)", |c| {
            c.certain_doubles
        }),
        row(report, "ran again after unknown", |c| c.ran_after_unknown),
        row(report, "unverified", |c| c.unverified),
    ];
    let codes: std::collections::BTreeSet<&String> = report
        .columns
        .iter()
        .flat_map(|(_, counts)| counts.errors.keys())
        .collect();
    for code in codes {
        rows.push(row(report, &format!("error: {code}"), |c| {
            c.errors.get(code.as_str()).copied().unwrap_or(0)
        }));
    }

    let headings: Vec<&str> = report.columns.iter().map(|(c, _)| c.name()).collect();
    let widths: Vec<usize> = headings
        .iter()
        .enumerate()
        .map(|(column, heading)| {
            rows.iter()
                .map(|(_, values)| values[column].to_string().len())
                .chain([heading.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let label_width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = write!(out, "| {:label_width$} |", "");
    for (heading, width) in headings.iter().zip(&widths) {
        let _ = write!(out, " {heading:>width$} |");
    }
    let _ = write!(out, "\n|{}|", "-".repeat(label_width + 2));
    for width in &widths {
        let _ = write!(out, "{}:|", "-".repeat(width + 1));
    }
    for (label, values) in rows {
        let _ = write!(out, "\n| {label:label_width$} |");
        for (value, width) in values.iter().zip(&widths) {
            let _ = write!(out, " {value:>width$} |");
        }
    }
    out.push('\n');
    out
}

fn row(report: &Report, label: &str, figure: impl Fn(&Counts) -> u64) -> (String, Vec<u64>) {
    (
        label.to_owned(),
        report
            .columns
            .iter()
            .map(|(_, counts)| figure(counts))
            .collect(),
    )
}

/// The lines under the table: the faults injected, the verdict, the failing keys.
/// `replay` is the command that draws the same plan again.
pub fn summary(
    report: &Report,
    history: &History,
    plan: &Plan,
    replay: &str,
    dir: &Path,
) -> String {
    let mut out = String::new();
    let kinds: &[FaultKind] = if history.replicated_postgres {
        &FaultKind::ALL
    } else {
        &FaultKind::SINGLE_POSTGRES
    };
    let injected: Vec<String> = kinds
        .iter()
        .map(|kind| {
            let n = history.faults.iter().filter(|f| f.kind == *kind).count();
            format!("{n} {}", kind.name())
        })
        .collect();
    let _ = writeln!(
        out,
        "faults injected: {} ({})",
        history.faults.len(),
        injected.join(", ")
    );
    let windows: Vec<String> = history
        .faults
        .iter()
        .filter_map(|fault| fault.failover_window_ms)
        .map(|ms| format!("{:.1} s", ms as f64 / 1000.0))
        .collect();
    if !windows.is_empty() {
        let _ = writeln!(
            out,
            "failover windows (primary's node killed → first write accepted): {}",
            windows.join(", ")
        );
    }
    if !history.verification_executions.is_empty() {
        let _ = writeln!(
            out,
            "the after-run replay checks ran {} operation(s) again",
            history.verification_executions.len()
        );
    }
    out.push_str(&verdict(report));
    let _ = writeln!(
        out,
        "seed {} (replay: {replay}); details: {}",
        plan.seed,
        dir.join("report.json").display()
    );
    out
}

/// PASS, or FAIL with the failing keys (the first few).
pub fn verdict(report: &Report) -> String {
    let mut out = String::new();
    let total = report.total();
    if report.failed() {
        let _ = writeln!(
            out,
            "FAIL: {} unexcused re-run key(s), {} certain double(s), {} divergent, {} lost \
             record(s), {} ran again after unknown, {} unverified",
            total.executed_twice_unexcused,
            total.certain_doubles,
            total.divergent,
            total.lost_records,
            total.ran_after_unknown,
            total.unverified
        );
        for key in report
            .keys
            .iter()
            .filter(|k| k.fails())
            .take(FAILING_KEYS_SHOWN)
        {
            let _ = writeln!(out, "  {}", describe(key));
        }
    } else {
        let _ = writeln!(
            out,
            "PASS: no unexcused re-run, no divergent answer, no lost record, no unknown \
             record ran again"
        );
    }
    out
}

/// One line about a failing key.
fn describe(key: &KeyVerdict) -> String {
    let mut parts = Vec::new();
    for rerun in &key.reruns {
        if let RerunVerdict::Unexcused { reason } = &rerun.verdict {
            parts.push(format!(
                "execution {} re-ran {}: {reason}",
                rerun.later, rerun.earlier
            ));
        }
    }
    if !key.divergent_answers.is_empty() {
        parts.push(format!(
            "{} different successful answers",
            key.divergent_answers.len()
        ));
    }
    if !key.lost.is_empty() {
        parts.push(format!(
            "{} check(s) did not answer as the record must",
            key.lost.len()
        ));
    }
    if !key.certain_doubles.is_empty() {
        parts.push(format!(
            "execution(s) {:?} ran again though the upstream shows the run before \
             committed, under `uncertain: hold` or `reconcile`",
            key.certain_doubles
        ));
    }
    if !key.ran_after_unknown.is_empty() {
        parts.push(format!(
            "execution(s) {:?} ran after a caller saw the record unknown",
            key.ran_after_unknown
        ));
    }
    if key.unverified {
        parts.push("the replay check could not reach the store".to_owned());
    }
    format!("{}: {}", key.key, parts.join("; "))
}

/// The per-policy table (`docs/guarantee.md#at-most-once-and-at-least-once-policies`):
/// one column per `uncertain` setting the plan guards keys with, one row per way a key
/// ended — so each setting's excuses are read beside each other.
pub fn policies(report: &Report, history: &History) -> String {
    const SETTINGS: [&str; 3] = ["hold", "reconcile", "retry"];
    let mut figures: Vec<(&str, [u64; 3])> = [
        "keys",
        "re-run after an uncertain outcome",
        "re-run after the service answered absent",
        "re-run after an upstream failure status",
        "re-run after an operator's change",
        "re-run, UNEXCUSED",
        "certain doubles",
        "left unknown",
    ]
    .into_iter()
    .map(|label| (label, [0; 3]))
    .collect();
    for key in &report.keys {
        let Some(path) = history
            .executions
            .iter()
            .find(|execution| execution.key.as_deref() == Some(key.key.as_str()))
            .map(|execution| execution.path.as_str())
        else {
            continue;
        };
        let setting = setting_name(history.policy.uncertain(path));
        let Some(column) = SETTINGS.iter().position(|s| *s == setting) else {
            continue;
        };
        let mut count = |row: usize, yes: bool| figures[row].1[column] += u64::from(yes);
        count(0, true);
        for rerun in &key.reruns {
            let row = match &rerun.verdict {
                RerunVerdict::Unexcused { .. } => 5,
                RerunVerdict::Excused { row, .. } => match row {
                    Row::ReconciledAbsent { .. } => 2,
                    Row::Forgotten { .. }
                    | Row::ForgottenByThePreviousRelease { .. }
                    | Row::Cooldown {
                        cause: CooldownCause::RetryableStatus(_),
                    } => 3,
                    Row::OperatorErased { .. } | Row::OperatorResolvedFailed { .. } => 4,
                    _ => 1,
                },
            };
            count(row, true);
        }
        count(6, !key.certain_doubles.is_empty());
        count(
            7,
            history.verifications.iter().any(|check| {
                check.key == key.key && check.outcome.problem_code() == Some("operation_unknown")
            }),
        );
    }
    let mut out = format!(
        "| per policy ({}) | {} |\n|---|{}\n",
        "re-runs; keys for the last two rows",
        SETTINGS.join(" | "),
        "---:|".repeat(SETTINGS.len())
    );
    for (label, values) in figures {
        let values: Vec<String> = values.iter().map(u64::to_string).collect();
        let _ = writeln!(out, "| {label} | {} |", values.join(" | "));
    }
    out
}

/// What `report.json` holds.
#[derive(Debug, Serialize)]
struct ReportFile<'a> {
    seed: u64,
    failed: bool,
    columns: &'a [(crate::checker::Column, Counts)],
    faults: &'a [crate::history::Fault],
    keys: &'a [KeyVerdict],
}

/// What `history.json` holds.
#[derive(Debug, Serialize)]
struct HistoryFile<'a> {
    plan: &'a Plan,
    history: &'a History,
}

/// Writes `report.json` and `history.json` into `dir`.
pub fn write(dir: &Path, report: &Report, history: &History, plan: &Plan) -> Result<(), String> {
    write_json(
        dir,
        "report.json",
        &ReportFile {
            seed: plan.seed,
            failed: report.failed(),
            columns: &report.columns,
            faults: &history.faults,
            keys: &report.keys,
        },
    )?;
    write_json(dir, "history.json", &HistoryFile { plan, history })
}

fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> Result<(), String> {
    let path = dir.join(name);
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| format!("serialize {}: {e}", path.display()))?;
    std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use crate::history::{Attempt, Outcome, Role};

    #[test]
    fn the_table_has_a_column_per_fault_kind_and_a_row_per_error_code() {
        let history = History {
            attempts: vec![Attempt {
                id: "r1".into(),
                key: "k".into(),
                caller: "c".into(),
                role: Role::First,
                attempt: 0,
                envoy: 0,
                body_sha256: "sha256:aa".into(),
                timeout_ms: 8000,
                start_ms: 0,
                end_ms: 5,
                outcome: Outcome::Answered {
                    status: 503,
                    body: String::new(),
                    replayed: false,
                    problem_code: Some("journal_unavailable".into()),
                },
            }],
            ..History::default()
        };
        let table = table(&check(&history));
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains(
                "| no fault | store kill | store freeze | postgres crash | postgres freeze | envoy \
                 kill | plugin push | proxy partition | store db partition | one way loss | slow link | envoy drain \
                 | wasm upgrade | rolling upgrade | envoy hot restart | operator erase | operator \
                 resolve | operator resolve failed | all |"
            ),
            "{table}"
        );
        let requests = lines
            .iter()
            .find(|l| l.starts_with("| requests"))
            .expect("requests row");
        assert!(requests.trim_end().ends_with("1 |"), "{table}");
        assert!(table.contains("| error: journal_unavailable"), "{table}");
    }
}
