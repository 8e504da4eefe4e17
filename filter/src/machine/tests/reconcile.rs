//! `uncertain: reconcile`: a claim that meets an `unknown` record asks the service, and
//! the service's answer settles it (`docs/reconcile.md`).

use keyflight_protocol::wire::StoredResponse;
use keyflight_protocol::wire::reconcile::{ReconciledRequest, ServiceAnswer};

use super::*;
use crate::metrics::{EventKind, Outcome};

fn reconciling() -> Rc<Config> {
    config_with(
        serde_json::json!({}),
        serde_json::json!({
            "uncertain": "reconcile",
            "reconcile": {"cluster": "payments", "token_env": "RECONCILE_TOKEN", "retry_after_s": 2}
        }),
    )
}

/// Drives a keyed request to its claim, which meets an `unknown` record of run 7; returns
/// the claim's scope and what the stream did.
fn meet_unknown(s: &mut Harness) -> (Digest, Vec<Action>) {
    s.host
        .environment
        .insert("RECONCILE_TOKEN".into(), "s3cret".into());
    let scope = s.drive_to_claim(b"{}").scope();
    let out = s.claim_answer(&ClaimResponse::Unknown { fence: Some(7) });
    (scope, out)
}

fn answer_with(s: &mut Harness, answer: &ServiceAnswer) -> Vec<Action> {
    s.answer(Some(200), &serde_json::to_vec(answer).unwrap())
}

/// The report sent to the store: committed with its response, or absent (`None`), and the fence.
fn reported(out: &[Action]) -> (Option<StoredResponse>, i64) {
    out.iter()
        .find_map(|a| match a {
            Action::CallStore {
                call: StoreCall::Reconciled { request, .. },
                ..
            } => Some((
                match request {
                    ReconciledRequest::Committed { response, .. } => Some(response.clone()),
                    ReconciledRequest::Absent { .. } => None,
                },
                request.fence(),
            )),
            _ => None,
        })
        .expect("a report to the lease-store")
}

#[test]
fn an_unknown_record_asks_the_service_with_the_operation_and_the_token() {
    let mut s = Harness::new(reconciling());
    let (scope, out) = meet_unknown(&mut s);
    let question = out
        .iter()
        .find_map(|a| match a {
            Action::AskService(q) => Some(q),
            _ => None,
        })
        .expect("the service is asked");
    assert_eq!((question.scope, question.fence), (scope, 7));
    assert_eq!(question.reconcile.cluster, "payments");
    assert_eq!(s.host.asked.last().unwrap().1.as_deref(), Some("s3cret"));
    assert!(!out.iter().any(|a| matches!(a, Action::Reply(_))), "held");
}

#[test]
fn committed_records_the_services_answer_and_replays_it() {
    let mut s = Harness::new(reconciling());
    let (scope, _) = meet_unknown(&mut s);
    let first_run = StoredResponse::new(
        201,
        vec![("content-type".into(), "application/json".into())],
        br#"{"paid":1}"#,
    );
    let out = answer_with(
        &mut s,
        &ServiceAnswer::Committed {
            scope,
            fence: 7,
            response: first_run.clone(),
        },
    );
    assert_eq!(reported(&out), (Some(first_run), 7));
    assert!(
        !out.iter().any(|a| matches!(a, Action::Reply(_))),
        "not before it is durable"
    );
    let out = s.ack();
    let r = reply(&out);
    assert_eq!((r.status, r.body.as_slice()), (201, &br#"{"paid":1}"#[..]));
    assert_eq!(
        counts(&out),
        vec![
            Metric::Event(EventKind::ReconcileCommitted),
            Metric::Outcome(Outcome::Replay)
        ]
    );
}

#[test]
fn absent_runs_the_request_under_a_new_claim_and_never_asks_twice() {
    let mut s = Harness::new(reconciling());
    let (scope, _) = meet_unknown(&mut s);
    let out = answer_with(&mut s, &ServiceAnswer::Absent { scope, fence: 7 });
    assert_eq!(reported(&out), (None, 7));
    let out = s.ack();
    assert!(
        out.iter().any(|a| matches!(
            a,
            Action::CallStore {
                call: StoreCall::Claim { .. },
                ..
            }
        )),
        "claims again: {out:?}"
    );
    assert_eq!(
        counts(&out),
        vec![Metric::Event(EventKind::ReconcileAbsent)]
    );
    // The new claim met `unknown` again: answered, not asked about in a loop.
    let out = s.claim_answer(&ClaimResponse::Unknown { fence: Some(9) });
    assert!(!out.iter().any(|a| matches!(a, Action::AskService(_))));
    assert_eq!(code(reply(&out)), "operation_unknown");
}

#[test]
fn an_unusable_answer_leaves_the_record_unknown_with_a_retry_after() {
    let other = Digest([9; 32]);
    let cases: Vec<(Option<u16>, Vec<u8>)> = vec![
        (None, vec![]),
        (Some(401), vec![]),
        (Some(200), b"{\"outcome\":\"maybe\"}".to_vec()),
        (
            Some(200),
            serde_json::to_vec(&ServiceAnswer::Absent {
                scope: other,
                fence: 7,
            })
            .unwrap(),
        ),
    ];
    for (status, body) in cases {
        let mut s = Harness::new(reconciling());
        let (scope, _) = meet_unknown(&mut s);
        let out = s.answer(status, &body);
        assert!(
            !out.iter().any(|a| matches!(a, Action::CallStore { .. })),
            "nothing reported for {status:?}"
        );
        let r = reply(&out);
        assert_eq!(
            (r.status, code(r).as_str(), header(r, "retry-after")),
            (409, "operation_unknown", Some("2")),
            "{status:?} {scope:?}"
        );
        assert!(counts(&out).contains(&Metric::Event(EventKind::ReconcileUnanswered)));
        assert!(detail(r).contains("run 7"), "names the run: {}", detail(r));
    }
}

#[test]
fn a_report_the_store_refuses_answers_unknown_and_one_it_finds_settled_claims_again() {
    let mut s = Harness::new(reconciling());
    let (scope, _) = meet_unknown(&mut s);
    answer_with(&mut s, &ServiceAnswer::Absent { scope, fence: 7 });
    let out = s.fail(CallError::Status(503));
    assert_eq!(code(reply(&out)), "operation_unknown");

    let mut s = Harness::new(reconciling());
    let (scope, _) = meet_unknown(&mut s);
    answer_with(&mut s, &ServiceAnswer::Absent { scope, fence: 7 });
    let out = s.fail(CallError::Status(409));
    assert!(out.iter().any(|a| matches!(
        a,
        Action::CallStore {
            call: StoreCall::Claim { .. },
            ..
        }
    )));
}

#[test]
fn a_hold_policy_never_asks() {
    let mut s = Harness::new(config());
    s.drive_to_claim(b"{}");
    let out = s.claim_answer(&ClaimResponse::Unknown { fence: Some(7) });
    assert!(!out.iter().any(|a| matches!(a, Action::AskService(_))));
    let r = reply(&out);
    assert_eq!(
        (code(r).as_str(), header(r, "retry-after")),
        ("operation_unknown", None)
    );
    assert!(!detail(r).contains("run 7"), "{}", detail(r));
}

fn detail(reply: &LocalReply) -> String {
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    body["detail"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_callers_request_to_the_reconcile_endpoint_is_refused() {
    let mut s = Harness::new(reconciling());
    let out = s.headers(
        request("POST", "/.well-known/keyflight/reconcile?x=1", &[]),
        true,
    );
    let r = reply(&out);
    assert_eq!((r.status, code(r).as_str()), (403, "forbidden"));
}
