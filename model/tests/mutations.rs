//! The model has teeth: each deliberate bug yields a counterexample, and the
//! unbroken protocol none (`docs/model.md#mutations`).

use keyflight_model::check::{check, trace};
use keyflight_model::{ClientSpec, Mutation, Params, Uncertain};

/// Checks `params` with `mutation` and asserts `property` is violated.
fn caught(params: Params, mutation: Mutation, property: &str) {
    let params = params.mutated(mutation);
    let report = check(params.clone(), 2, true);
    let found: Vec<&str> = report.violations.iter().map(|(name, _)| *name).collect();
    assert!(
        found.contains(&property),
        "{mutation:?} was not caught as \"{property}\" (found {found:?}, {} states)",
        report.unique
    );
    for (name, path) in &report.violations {
        assert!(!trace(&params, name, path).is_empty());
    }
}

const ONE_RUN: &str = "one execution per operation, beyond the excused";

fn short(horizon_ticks: u64) -> Params {
    Params {
        horizon_ticks,
        ..Params::bounded()
    }
}

#[test]
fn the_unbroken_protocol_holds_every_property_and_reaches_every_example() {
    let report = check(Params::bounded(), 2, false);
    let violated: Vec<&str> = report.violations.iter().map(|(name, _)| *name).collect();
    assert!(violated.is_empty(), "violated: {violated:?}");
    assert!(
        report.unreached.is_empty(),
        "unreached: {:?}",
        report.unreached
    );
}

#[test]
fn recording_after_the_reply_holds_every_property() {
    let mut params = short(8);
    params.filter.after_reply = true;
    let report = check(params, 2, false);
    let violated: Vec<&str> = report.violations.iter().map(|(name, _)| *name).collect();
    assert!(violated.is_empty(), "violated: {violated:?}");
}

#[test]
fn an_outbox_that_drops_a_record_recorded_after_the_reply_is_caught() {
    let mut params = short(8);
    params.filter.after_reply = true;
    caught(params, Mutation::OutboxDropsOnTransientError, ONE_RUN);
}

#[test]
fn a_takeover_that_ignores_the_grace_is_caught() {
    caught(short(8), Mutation::TakeoverIgnoresGrace, ONE_RUN);
}

/// The store's own rule (`keyflight-store-core`), not a mirror of it.
#[test]
fn a_store_grace_that_holds_only_while_the_database_fails_is_caught() {
    caught(short(8), Mutation::GraceOnlyWhileFailing, ONE_RUN);
}

#[test]
fn a_cleanup_that_deletes_a_live_pending_row_is_caught() {
    caught(short(8), Mutation::CleanupDeletesLivePending, ONE_RUN);
}

#[test]
fn a_finalize_not_fenced_by_claim_id_is_caught() {
    caught(
        short(8),
        Mutation::FinalizeUnfenced,
        "a stale fence never settles",
    );
}

#[test]
fn a_steal_that_ignores_the_fingerprint_is_caught() {
    // A retry policy: a hold policy's lapsed lease is held whatever the fingerprint.
    let mut params = Params {
        clients: vec![
            ClientSpec { op: 0, attempts: 1 },
            ClientSpec { op: 1, attempts: 1 },
        ],
        ..short(8)
    };
    params.filter.uncertain = Uncertain::Retry;
    caught(
        params,
        Mutation::StealIgnoresFingerprint,
        "another request's record is never taken within its retention",
    );
}

#[test]
fn an_outbox_that_drops_a_record_on_a_transient_error_is_caught() {
    caught(short(8), Mutation::OutboxDropsOnTransientError, ONE_RUN);
}

#[test]
fn a_renew_timeout_past_the_lease_slack_is_caught() {
    let params = Params {
        proxies: 1,
        ..short(7)
    };
    caught(params, Mutation::RenewTimeoutPastSlack, ONE_RUN);
}

#[test]
fn a_proxy_whose_claims_carry_no_flag_holds_every_property() {
    let mut params = short(8);
    params.unflagged_proxy = Some(0);
    let report = check(params, 2, false);
    let violated: Vec<&str> = report.violations.iter().map(|(name, _)| *name).collect();
    assert!(violated.is_empty(), "violated: {violated:?}");
}

#[test]
fn a_hold_that_ignores_the_retrys_flag_is_caught() {
    caught(short(8), Mutation::HoldIgnoresTheRetrysFlag, ONE_RUN);
}

#[test]
fn a_steal_that_takes_over_a_hold_policys_lapsed_lease_is_caught() {
    caught(short(8), Mutation::StealIgnoresHold, ONE_RUN);
}

#[test]
fn reconciling_with_the_service_holds_every_property_and_reaches_every_example() {
    let report = check(Params::reconciling(), 2, false);
    let violated: Vec<&str> = report.violations.iter().map(|(name, _)| *name).collect();
    assert!(violated.is_empty(), "violated: {violated:?}");
    assert!(
        report.unreached.is_empty(),
        "unreached: {:?}",
        report.unreached
    );
}

const NO_LATE_COMMIT: &str =
    "no fence runs while an earlier fence of the same scope may still commit";

fn reconciling(horizon_ticks: u64) -> Params {
    Params {
        horizon_ticks,
        ..Params::reconciling()
    }
}

#[test]
fn a_floor_that_admits_its_own_fence_is_caught() {
    caught(
        reconciling(8),
        Mutation::FloorAdmitsItsFence,
        NO_LATE_COMMIT,
    );
}

#[test]
fn an_absent_answer_that_leaves_no_floor_is_caught() {
    caught(reconciling(8), Mutation::AbsentWithoutFloor, NO_LATE_COMMIT);
}
