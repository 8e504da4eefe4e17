//! The judge's corpus (`chaos/tests/corpus/*.json`): small histories, each with what the
//! judge must say about it. `excused-*` histories show one excused row of the guarantee
//! table each and must pass; `forbidden-*` histories each look innocent to a checker that
//! reasons from time windows (a kill somewhere between a request and its re-run) while
//! breaking the guarantee, and must fail for the reason in their `finding`.

use std::path::PathBuf;

use serde::Deserialize;

use super::check;
use crate::history::History;

#[derive(Deserialize)]
struct Case {
    about: String,
    expect: Expect,
    /// A piece of the failing key's verdict (as JSON) that names why it fails.
    finding: Option<String>,
    history: History,
}

#[derive(Deserialize, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
enum Expect {
    Pass,
    Fail,
}

fn corpus() -> Vec<(String, Case)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut cases: Vec<(String, Case)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a corpus file");
            let case =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.display().to_string(), case)
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    cases
}

#[test]
fn every_excused_row_passes_and_every_forbidden_history_fails_for_its_reason() {
    let cases = corpus();
    let named = |prefix: &str, expect: Expect| {
        cases
            .iter()
            .filter(|(path, case)| path.contains(prefix) && case.expect == expect)
            .count()
    };
    assert!(named("/excused-", Expect::Pass) >= 5, "the excused rows");
    assert!(
        named("/forbidden-", Expect::Fail) >= 10,
        "the forbidden histories"
    );
    for (path, case) in &cases {
        let report = check(&case.history);
        let verdicts = serde_json::to_string(&report.keys).expect("verdicts serialize");
        match case.expect {
            Expect::Pass => assert!(
                !report.failed(),
                "{path} ({}) must pass: {report:#?}",
                case.about
            ),
            Expect::Fail => {
                assert!(report.failed(), "{path} ({}) must fail", case.about);
                let finding = case
                    .finding
                    .as_deref()
                    .expect("a failing case names its finding");
                assert!(
                    verdicts.contains(finding),
                    "{path} must fail because `{finding}`: {verdicts}"
                );
            }
        }
    }
}

#[test]
fn the_answer_lost_with_its_proxy_is_counted_apart() {
    for name in [
        "excused-proxy-killed-with-the-record-in-its-outbox.json",
        "excused-proxy-partitioned-past-its-lease.json",
        "excused-proxy-drained-with-the-record-in-its-outbox.json",
        "excused-vm-retired-by-a-module-push.json",
        "excused-recorded-4xx-lost-with-its-proxy.json",
        "excused-proxy-partitioned-answered-after-the-takeover.json",
    ] {
        let case = corpus()
            .into_iter()
            .find(|(path, _)| path.ends_with(name))
            .expect("the case");
        let report = check(&case.1.history);
        let total = report.total();
        assert_eq!(
            (
                total.executed_twice_excused,
                total.delivered_then_lost_with_proxy,
                total.divergent,
                total.lost_records
            ),
            (1, 1, 0, 0),
            "{name}"
        );
    }
}

#[test]
fn a_held_lapse_counts_the_answer_lost_with_its_proxy_and_runs_nothing_twice() {
    let name = "excused-hold-proxy-killed-with-the-record-in-its-outbox-held-unknown.json";
    let case = corpus()
        .into_iter()
        .find(|(path, _)| path.ends_with(name))
        .expect("the case");
    let total = check(&case.1.history).total();
    assert_eq!(
        (
            total.executed_twice_excused,
            total.delivered_then_lost_with_proxy,
            total.divergent,
            total.lost_records
        ),
        (0, 1, 0, 0)
    );
    let forbidden = corpus()
        .into_iter()
        .find(|(path, _)| path.ends_with("forbidden-hold-lapse-held-while-its-proxy-lived.json"))
        .expect("the forbidden case");
    assert_eq!(check(&forbidden.1.history).total().lost_records, 1);
}

#[test]
fn a_re_run_after_a_committed_first_run_under_hold_is_a_certain_double() {
    let total = |name: &str| {
        let case = corpus()
            .into_iter()
            .find(|(path, _)| path.ends_with(name))
            .expect("the case");
        let total = check(&case.1.history).total();
        (total.executed_twice_unexcused, total.certain_doubles)
    };
    assert_eq!(total("forbidden-certain-double-under-hold.json"), (1, 1));
    assert_eq!(
        total("forbidden-hold-policy-takeover-of-claims-logged-without-the-flag.json"),
        (1, 0),
        "the upstream's log does not show the first run committed"
    );
    assert_eq!(
        total("excused-retryable-5xx-re-run-after-the-cooldown.json"),
        (0, 0),
        "a failure the policy admits"
    );
}
