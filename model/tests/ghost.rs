//! The ghost's excuse rule on written histories: an orphan takeover given back, which the
//! bounded check cannot reach (it needs a crash and a caller giving up in one history, two
//! faults, and the check with two faults outgrows this machine's memory), and a re-run
//! after the service's `absent` (`docs/model.md#properties`).

use keyflight_model::Uncertain;
use keyflight_model::db::{How, RowState};
use keyflight_model::ghost::{ClaimWon, Displaced, Excuse, Execution, Ghost};
use keyflight_protocol::Digest;

/// The policies the histories below are judged under (no proxy on a previous release).
const RETRY: (Uncertain, Option<u8>) = (Uncertain::Retry, None);
const HOLD: (Uncertain, Option<u8>) = (Uncertain::Hold, None);
const RECONCILE: (Uncertain, Option<u8>) = (Uncertain::Reconcile, None);

fn displaced(fence: u16, state: RowState) -> Option<Displaced> {
    Some(Displaced {
        fence,
        fingerprint: Digest::of(b"op"),
        state,
        past_retention: false,
        deleted: false,
        at_most_once: false,
    })
}

fn claim(fence: u16, how: How, at: u64, took: Option<Displaced>) -> ClaimWon {
    ClaimWon {
        fence,
        claim_id: fence,
        op: 0,
        how,
        at,
        displaced: took,
        fingerprint: Digest::of(b"op"),
        at_most_once: false,
    }
}

fn run(n: u16, fence: u16, at: u64) -> Execution {
    Execution {
        n,
        op: 0,
        fence,
        proxy: 0,
        at,
    }
}

/// Fence 1 ran and its proxy died; fence 2 took its lapsed lease over for a caller that
/// gave up, and was released; fence 3 took the record over and ran.
fn through_an_orphan(given_back: Vec<u16>) -> (Ghost, Execution, Execution) {
    let ghost = Ghost {
        claims: vec![
            claim(1, How::Claimed, 0, None),
            claim(
                2,
                How::RecoveredAbandoned,
                3000,
                displaced(1, RowState::Pending),
            ),
            claim(
                3,
                How::RecoveredAbandoned,
                3500,
                displaced(2, RowState::Failed),
            ),
        ],
        crashes: vec![(0, 500)],
        given_back,
        ..Ghost::default()
    };
    (ghost, run(1, 1, 10), run(2, 3, 3600))
}

#[test]
fn a_rerun_through_an_orphan_takeover_given_back_is_excused() {
    let (ghost, first, rerun) = through_an_orphan(vec![2]);
    assert_eq!(ghost.excuse(&first, &rerun, RETRY), Ok(Excuse::ProxyDied));
    let refused = ghost.excuse(&first, &rerun, HOLD).unwrap_err();
    assert!(refused.contains("never runs again"), "{refused}");
}

#[test]
fn a_rerun_through_a_failed_record_that_was_not_given_back_is_not() {
    let (ghost, first, rerun) = through_an_orphan(Vec::new());
    let refused = ghost.excuse(&first, &rerun, RETRY).unwrap_err();
    assert!(
        refused.contains("did not take over an unsettled claim"),
        "{refused}"
    );
}

/// Fence 1 ran under `uncertain: reconcile` and its record became `unknown`; fence 2 took
/// the record, `failed` by a reconciled `absent`, and ran. `absent_said`: the ledger's
/// (fence, when).
fn after_a_question(absent_said: Vec<(u16, u64)>) -> (Ghost, Execution, Execution) {
    let mut took = displaced(1, RowState::Failed);
    if let Some(d) = took.as_mut() {
        d.at_most_once = true;
    }
    let ghost = Ghost {
        claims: vec![
            claim(1, How::Claimed, 0, None),
            claim(2, How::RecoveredAbandoned, 3000, took),
        ],
        absent_said,
        ..Ghost::default()
    };
    (ghost, run(1, 1, 10), run(2, 2, 3000))
}

#[test]
fn a_rerun_is_excused_by_the_services_absent_about_the_earlier_fence_only() {
    let (ghost, first, rerun) = after_a_question(vec![(1, 3000)]);
    assert_eq!(
        ghost.excuse(&first, &rerun, RECONCILE),
        Ok(Excuse::ServiceAbsent)
    );
    assert!(
        ghost.excuse(&first, &rerun, HOLD).is_err(),
        "a policy that never asks is never excused by an answer"
    );
    for absent_said in [vec![], vec![(1, 3500)], vec![(2, 3000)]] {
        let (ghost, first, rerun) = after_a_question(absent_said.clone());
        assert!(
            ghost.excuse(&first, &rerun, RECONCILE).is_err(),
            "{absent_said:?}"
        );
    }
}
