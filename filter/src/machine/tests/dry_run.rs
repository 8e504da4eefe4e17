//! F11: `mode: dry_run` claims and records, never blocks, waits or replays.

use keyflight_protocol::wire::StoredResponse;

use super::*;
use crate::metrics::Outcome;

fn dry() -> Rc<Config> {
    config_with(
        serde_json::json!({"mode": "dry_run"}),
        serde_json::json!({}),
    )
}

#[test]
fn dry_run_never_blocks_or_replays_but_counts() {
    // A bad key passes.
    let mut s = Harness::new(dry());
    let out = s.headers(
        request(
            "POST",
            "/payments",
            &[("idempotency-key", ""), ("x-user", "alice")],
        ),
        false,
    );
    assert_eq!(
        out,
        vec![
            Action::Count(Metric::DryRun(Outcome::RejectedInvalid)),
            Action::ContinueRequest
        ]
    );
    // A replay or refusal resumes the request instead.
    for answer in [
        ClaimResponse::Conflict,
        ClaimResponse::Completed {
            response: StoredResponse::new(200, vec![], b"x"),
        },
    ] {
        let mut s = Harness::new(dry());
        s.drive_to_claim(b"{}");
        let out = s.claim_answer(&answer);
        assert!(out.contains(&Action::ResumeRequest));
        assert!(!out.iter().any(|a| matches!(a, Action::Reply(_))));
        assert_eq!(s.respond(200, true), vec![Action::ContinueResponse]);
    }
    // Store down: passes.
    let mut s = Harness::new(dry());
    s.drive_to_claim(b"{}");
    let out = s.fail(CallError::NoAnswer);
    assert!(out.contains(&Action::ResumeRequest));
    assert!(counts(&out).contains(&Metric::DryRun(Outcome::JournalUnavailable)));
    // A winner records, without telling the upstream a fence.
    let mut s = Harness::new(dry());
    s.drive_to_claim(b"{}");
    let out = s.claim_answer(&won(5));
    assert!(out.contains(&Action::ResumeRequest));
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::SetRequestHeader { .. }))
    );
    let out = s.respond(200, true);
    assert_eq!(counts(&out), vec![Metric::DryRun(Outcome::WonCompleted)]);
    assert_eq!(calls(&out).len(), 1);
}

#[test]
fn dry_run_followers_never_long_poll() {
    let mut s = Harness::new(dry());
    match s.drive_to_claim(b"{}") {
        StoreCall::Claim { request, .. } => assert_eq!(
            request.wait_ms, None,
            "dry_run never holds a request up to follower_wait"
        ),
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[test]
fn a_dry_run_never_uses_the_edge_cache() {
    // Every dry-run request claims, so the store sees all the traffic a
    // rollout is measuring; what enforce would replay counts as dry_run.replay.
    let mut s = Harness::new(cached(
        serde_json::json!({"mode": "dry_run"}),
        serde_json::json!({}),
    ));
    assert!(matches!(s.drive_to_claim(b"{}"), StoreCall::Claim { .. }));
    let out = s.claim_answer(&won(1));
    assert!(out.contains(&Action::ResumeRequest));
    s.respond(201, true);
    let out = s.ack();
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::WriteEdgeCache { .. })),
        "{out:?}"
    );
}
