//! The outbox, driven through every interleaving that matters: renewals on
//! schedule, a hand-off retried until it lands, a theft, a budget that runs
//! out, a refused finalize downgraded, a full outbox.

use keyflight_protocol::wire::{FinalizeRequest, ReleaseAs, ReleaseRequest, StoredResponse};

use super::delivery::ENTRY_OVERHEAD_BYTES;
use super::*;
use crate::metrics::Metric;
use crate::store_call::CallError;

const SECOND: u64 = 1000;

fn claim(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn scope(n: u128) -> Digest {
    Digest([u8::try_from(n % 256).unwrap(); 32])
}

fn lease(n: u128) -> Lease {
    Lease {
        previous_scope: None,
        scope: scope(n),
        claim_id: claim(n),
        lease: Duration::from_secs(30),
        interval: Duration::from_secs(10),
        age: Duration::ZERO,
    }
}

fn finalize(n: u128, body: &[u8]) -> StoreCall {
    StoreCall::Finalize {
        scope: scope(n),
        request: FinalizeRequest {
            claim_id: claim(n),
            response: StoredResponse::new(
                201,
                vec![("content-type".into(), "application/json".into())],
                body,
            ),
            replayable: true,
            previous_scope: None,
        },
    }
}

fn release(n: u128) -> StoreCall {
    StoreCall::Release {
        scope: scope(n),
        request: ReleaseRequest {
            claim_id: claim(n),
            release_as: ReleaseAs::Unknown,
            cooldown_ms: None,
            previous_scope: None,
        },
    }
}

fn handoff(n: u128, call: StoreCall, last_error: Option<CallError>) -> Handoff {
    Handoff {
        claim_id: claim(n),
        fence: i64::try_from(n).unwrap_or(i64::MAX),
        call,
        last_error,
        budget: Duration::from_secs(60),
    }
}

fn dispatched(out: &[OutboxAction]) -> Vec<(CallId, StoreCall)> {
    out.iter()
        .filter_map(|a| match a {
            OutboxAction::Dispatch { id, call } => Some((*id, call.clone())),
            _ => None,
        })
        .collect()
}

fn counted(out: &[OutboxAction]) -> Vec<Metric> {
    out.iter()
        .filter_map(|a| match a {
            OutboxAction::Count(m) => Some(*m),
            _ => None,
        })
        .collect()
}

/// The sum of every gauge change in `out`.
fn gauge(out: &[OutboxAction], which: Gauge) -> i64 {
    out.iter()
        .filter_map(|a| match a {
            OutboxAction::Adjust { gauge, delta } if *gauge == which => Some(*delta),
            _ => None,
        })
        .sum()
}

fn settle(n: u128) -> CallId {
    CallId {
        claim_id: claim(n),
        kind: CallKind::Settle,
    }
}

fn renew(n: u128) -> CallId {
    CallId {
        claim_id: claim(n),
        kind: CallKind::Renew,
    }
}

/// Ticks at `now` and returns the settle call dispatched for claim `n`.
fn settle_due(outbox: &mut Outbox, n: u128, now: u64) -> Option<StoreCall> {
    dispatched(&outbox.on_tick(now))
        .into_iter()
        .find(|(id, _)| *id == settle(n))
        .map(|(_, call)| call)
}

#[test]
fn a_streams_lease_is_renewed_every_interval_and_not_before() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(7), 1000);
    assert!(dispatched(&outbox.on_tick(10_999)).is_empty());
    let due = dispatched(&outbox.on_tick(11_000));
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].0, renew(7));
    match &due[0].1 {
        StoreCall::Renew { request, .. } => {
            assert_eq!(request.lease_ms, 30_000);
            assert_eq!(request.claim_id, claim(7));
        }
        other => panic!("unexpected call {other:?}"),
    }
    assert!(outbox.on_answer(renew(7), Ok(()), 11_010).is_empty());
    assert!(dispatched(&outbox.on_tick(20_999)).is_empty());
    assert_eq!(dispatched(&outbox.on_tick(21_000)).len(), 1);
    outbox.stop(claim(7));
    outbox.stop(claim(7));
    assert!(outbox.is_empty());
}

#[test]
fn a_failed_renew_is_retried_on_the_backoff_not_a_whole_interval_later() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(3), 0);
    assert_eq!(dispatched(&outbox.on_tick(10_000)).len(), 1);
    outbox.on_answer(renew(3), Err(CallError::NoAnswer), 10_000);
    let first_retry = backoff_ms(claim(3), 1);
    assert!(first_retry <= BACKOFF_BASE_MS, "{first_retry}");
    assert!(dispatched(&outbox.on_tick(10_000 + first_retry - 1)).is_empty());
    assert_eq!(dispatched(&outbox.on_tick(10_000 + first_retry)).len(), 1);
    // Failures in a row back off further, never past the cap.
    let mut now = 10_000 + first_retry;
    for failures in 2..12 {
        outbox.on_answer(renew(3), Err(CallError::Status(503)), now);
        let delay = backoff_ms(claim(3), failures);
        assert!(delay <= BACKOFF_CAP_MS);
        now += delay;
        assert_eq!(
            dispatched(&outbox.on_tick(now)).len(),
            1,
            "failure {failures}"
        );
    }
    // Once a renew lands, the interval schedule resumes.
    outbox.on_answer(renew(3), Ok(()), now);
    assert!(dispatched(&outbox.on_tick(now + 9_999)).is_empty());
    assert_eq!(dispatched(&outbox.on_tick(now + 10_000)).len(), 1);
}

#[test]
fn a_renew_stuck_past_the_interval_does_not_hold_up_the_next() {
    // A renew hanging on a frozen replica must not keep the lease from being
    // renewed through another one: one interval later, the next renew goes out
    // as a new call (which Envoy may route to another host).
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(1), 0);
    assert_eq!(dispatched(&outbox.on_tick(10_000)).len(), 1);
    assert!(dispatched(&outbox.on_tick(19_999)).is_empty());
    assert_eq!(
        dispatched(&outbox.on_tick(20_000)),
        vec![(
            renew(1),
            StoreCall::Renew {
                scope: scope(1),
                request: RenewRequest {
                    claim_id: claim(1),
                    lease_ms: 30_000,
                    previous_scope: None,
                },
            }
        )],
        "a second renew while the first still hangs"
    );
    // The second lands; the stuck one's late failure costs one early renew.
    assert!(outbox.on_answer(renew(1), Ok(()), 20_050).is_empty());
    assert_eq!(
        counted(&outbox.on_answer(renew(1), Err(CallError::NoAnswer), 21_000)),
        vec![Metric::Event(EventKind::RenewError)]
    );
    assert_eq!(dispatched(&outbox.on_tick(21_100)).len(), 1);
}

#[test]
fn at_most_two_renews_of_a_claim_are_in_flight() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(1), 0);
    assert_eq!(dispatched(&outbox.on_tick(10_000)).len(), 1);
    assert_eq!(dispatched(&outbox.on_tick(20_000)).len(), 1);
    assert!(dispatched(&outbox.on_tick(30_000)).is_empty());
    assert!(dispatched(&outbox.on_tick(40_000)).is_empty());
    outbox.on_answer(renew(1), Err(CallError::NoAnswer), 40_000);
    assert_eq!(dispatched(&outbox.on_tick(40_100)).len(), 1);
}

#[test]
fn a_theft_is_counted_once_whoever_finds_it_first() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(1), 0);
    outbox.start(lease(2), 0);
    assert_eq!(dispatched(&outbox.on_tick(10_000)).len(), 2);
    // Claim 1: a renew finds it first; the stream's finding is not recounted.
    assert_eq!(
        counted(&outbox.on_answer(renew(1), Err(CallError::LeaseLost), 10_000)),
        vec![Metric::Event(EventKind::LeaseStolen)]
    );
    assert!(outbox.lease_lost(claim(1)).is_empty());
    assert_eq!(outbox.renewing(), 1, "a lost lease is not renewed");
    // Claim 2: the stream finds it first (its renew is still in flight).
    assert_eq!(
        counted(&outbox.lease_lost(claim(2))),
        vec![Metric::Event(EventKind::LeaseStolen)]
    );
    assert!(
        outbox
            .on_answer(renew(2), Err(CallError::LeaseLost), 10_000)
            .is_empty()
    );
    outbox.stop(claim(1));
    outbox.stop(claim(2));
    assert!(outbox.is_empty());
    // A claim that was never registered still counts its theft.
    assert_eq!(
        counted(&outbox.lease_lost(claim(3))),
        vec![Metric::Event(EventKind::LeaseStolen)]
    );
}

#[test]
fn a_handed_off_record_is_resent_with_growing_jittered_backoff_until_it_lands() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(5), 0);
    let call = finalize(5, b"{\"id\":5}");
    let out = outbox.hand_off(handoff(5, call.clone(), Some(CallError::NoAnswer)), 0);
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::TakenOver)]);
    assert_eq!(gauge(&out, Gauge::OutboxDepth), 1);
    assert!(gauge(&out, Gauge::OutboxBytes) > 0);
    assert_eq!(outbox.depth(), 1);

    let mut now = 0;
    let mut previous_delay = 0;
    for attempt in 1..=8 {
        // Find when the attempt comes due, one millisecond at a time is too
        // slow; the schedule is within [half, full] of the doubling ceiling.
        let ceiling = (BACKOFF_BASE_MS << (attempt - 1)).min(BACKOFF_CAP_MS);
        assert!(
            settle_due(&mut outbox, 5, now + ceiling / 2 - 1).is_none(),
            "attempt {attempt} came before half its ceiling"
        );
        let due_at = (now + ceiling / 2..=now + ceiling)
            .find(|&t| {
                outbox
                    .entries
                    .get(&claim(5))
                    .and_then(|e| e.delivery.as_ref())
                    .is_some_and(|d| d.next_attempt_ms <= t)
            })
            .expect("due within its ceiling");
        let sent = settle_due(&mut outbox, 5, due_at).expect("dispatched when due");
        assert_eq!(sent, call, "the same fenced call every time");
        assert!(
            settle_due(&mut outbox, 5, due_at + 10 * SECOND).is_none(),
            "never two in flight"
        );
        let delay = due_at - now;
        if attempt > 1 && ceiling < BACKOFF_CAP_MS {
            assert!(delay > previous_delay / 2, "backoff grows");
        }
        assert!(delay <= BACKOFF_CAP_MS, "capped");
        previous_delay = delay;
        now = due_at;
        let out = outbox.on_answer(settle(5), Err(CallError::Status(503)), now);
        assert!(counted(&out).is_empty(), "{out:?}");
    }
    let now = now + BACKOFF_CAP_MS;
    assert!(settle_due(&mut outbox, 5, now).is_some());
    let out = outbox.on_answer(settle(5), Ok(()), now);
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::Delivered)]);
    assert_eq!(gauge(&out, Gauge::OutboxDepth), -1);
    assert!(outbox.is_empty(), "delivered: nothing left to renew");
    assert_eq!(outbox.bytes, 0);
}

#[test]
fn a_record_whose_answer_was_never_seen_is_resent_at_once_and_renewal_goes_on() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(4), 0);
    outbox.hand_off(handoff(4, release(4), None), 5000);
    let out = outbox.on_tick(5000);
    assert_eq!(
        dispatched(&out),
        vec![(settle(4), release(4))],
        "the cancelled call goes out on the next tick"
    );
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::Retried)]);
    // Renewals continue on their schedule while the record is delivered.
    let due = dispatched(&outbox.on_tick(10_000));
    assert_eq!(
        due.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![renew(4)]
    );
}

#[test]
fn jitter_spreads_claims_that_failed_together() {
    let delays: std::collections::BTreeSet<u64> =
        (0..32).map(|n| backoff_ms(claim(n), 3)).collect();
    assert!(delays.len() > 8, "{delays:?}");
    assert!(delays.iter().all(|d| (200..=400).contains(d)), "{delays:?}");
    assert_eq!(
        backoff_ms(claim(1), 3),
        backoff_ms(claim(1), 3),
        "deterministic"
    );
}

#[test]
fn a_renew_lost_during_a_delivery_waits_for_the_deliverys_own_answer() {
    // The record may have landed before the renew (its answer lost): the
    // store then answers the repeat with success, and nothing was stolen.
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(6), 0);
    outbox.hand_off(handoff(6, finalize(6, b"{}"), Some(CallError::NoAnswer)), 0);
    let out = outbox.on_tick(10_000);
    assert!(dispatched(&out).iter().any(|(id, _)| *id == renew(6)));
    assert!(
        counted(&outbox.on_answer(renew(6), Err(CallError::LeaseLost), 10_000)).is_empty(),
        "not counted as a theft yet"
    );
    assert_eq!(outbox.renewing(), 0, "renewing stops");
    let out = outbox.on_answer(settle(6), Ok(()), 10_001);
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::Delivered)]);
}

#[test]
fn a_delivery_that_finds_the_lease_stolen_stops_and_counts_the_theft_once() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(8), 0);
    outbox.hand_off(handoff(8, release(8), None), 0);
    assert!(settle_due(&mut outbox, 8, 0).is_some());
    let out = outbox.on_answer(settle(8), Err(CallError::LeaseLost), 1);
    assert_eq!(
        counted(&out),
        vec![
            Metric::Outbox(OutboxEvent::Lost),
            Metric::Event(EventKind::LeaseStolen)
        ]
    );
    assert!(outbox.is_empty());
}

#[test]
fn when_the_budget_runs_out_the_outbox_gives_up_and_says_so() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(9), 0);
    outbox.hand_off(handoff(9, release(9), Some(CallError::NoAnswer)), 0);
    let mut now = 0;
    while now + 250 < 60 * SECOND {
        now += 250;
        let out = outbox.on_tick(now);
        for (id, _) in dispatched(&out) {
            outbox.on_answer(id, Err(CallError::NoAnswer), now);
        }
        if counted(&out).contains(&Metric::Outbox(OutboxEvent::GivenUp)) {
            panic!("gave up before the budget at {now}");
        }
    }
    let out = outbox.on_tick(60 * SECOND);
    assert!(counted(&out).contains(&Metric::Outbox(OutboxEvent::GivenUp)));
    assert!(
        out.iter().any(|a| matches!(a, OutboxAction::Log { level: LogLevel::Warn, message } if message.contains("retry budget"))),
        "{out:?}"
    );
    assert!(
        outbox.is_empty(),
        "renewing stops too: the lease will expire"
    );
    assert!(dispatched(&outbox.on_tick(now + 60 * SECOND)).is_empty());
}

#[test]
fn a_call_in_flight_when_the_budget_ends_gets_its_answer_first() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(3), 0);
    outbox.hand_off(handoff(3, release(3), None), 0);
    assert!(settle_due(&mut outbox, 3, 59_999).is_some());
    assert!(
        !counted(&outbox.on_tick(70_000)).contains(&Metric::Outbox(OutboxEvent::GivenUp)),
        "still waiting for the answer"
    );
    let out = outbox.on_answer(settle(3), Ok(()), 70_001);
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::Delivered)]);
}

#[test]
fn a_finalize_the_store_refuses_is_recorded_completed_but_not_replayable() {
    for refusal in [413, 400] {
        let mut outbox = Outbox::new(1 << 20);
        outbox.start(lease(2), 0);
        // The stream's own attempt was refused: the outbox downgrades at once.
        let big = finalize(2, &[b'x'; 4096]);
        let out = outbox.hand_off(handoff(2, big, Some(CallError::Status(refusal))), 0);
        assert_eq!(
            counted(&out),
            vec![
                Metric::Outbox(OutboxEvent::TakenOver),
                Metric::Outbox(OutboxEvent::Downgraded)
            ]
        );
        let sent = settle_due(&mut outbox, 2, 0).expect("sent at once");
        let StoreCall::Finalize { request, .. } = &sent else {
            panic!("{sent:?}")
        };
        assert!(!request.replayable);
        assert_eq!(request.response.status, 201);
        assert!(request.response.headers.is_empty());
        assert!(request.response.body.is_empty());
        // Refused again: nothing lesser to send.
        let out = outbox.on_answer(settle(2), Err(CallError::Status(refusal)), 1);
        assert!(counted(&out).contains(&Metric::Outbox(OutboxEvent::GivenUp)));
        assert!(outbox.is_empty());
    }
}

#[test]
fn a_finalize_refused_during_delivery_is_downgraded_and_frees_its_bytes() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(2), 0);
    outbox.hand_off(handoff(2, finalize(2, &[b'x'; 30_000]), None), 0);
    let held = outbox.bytes;
    assert!(held > 40_000, "{held}");
    assert!(settle_due(&mut outbox, 2, 0).is_some());
    let out = outbox.on_answer(settle(2), Err(CallError::Status(413)), 1);
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::Downgraded)]);
    assert_eq!(
        i64::try_from(outbox.bytes).unwrap(),
        i64::try_from(held).unwrap() + gauge(&out, Gauge::OutboxBytes)
    );
    assert!(outbox.bytes < 1000);
    let StoreCall::Finalize { request, .. } = settle_due(&mut outbox, 2, 1).unwrap() else {
        panic!()
    };
    assert!(!request.replayable);
}

#[test]
fn a_release_the_store_refuses_is_given_up() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(2), 0);
    let out = outbox.hand_off(handoff(2, release(2), Some(CallError::Status(400))), 0);
    assert!(counted(&out).contains(&Metric::Outbox(OutboxEvent::GivenUp)));
    assert!(outbox.is_empty());
}

#[test]
fn a_full_outbox_downgrades_then_refuses_and_never_exceeds_its_bound() {
    let max = 4 * 1024;
    let mut outbox = Outbox::new(max);
    // Fits whole.
    outbox.start(lease(1), 0);
    let out = outbox.hand_off(handoff(1, finalize(1, &[b'a'; 1500]), None), 0);
    assert_eq!(counted(&out), vec![Metric::Outbox(OutboxEvent::TakenOver)]);
    // Does not fit whole: recorded as not replayable instead.
    outbox.start(lease(2), 0);
    let out = outbox.hand_off(handoff(2, finalize(2, &[b'b'; 3000]), None), 0);
    assert_eq!(
        counted(&out),
        vec![
            Metric::Outbox(OutboxEvent::TakenOver),
            Metric::Outbox(OutboxEvent::Downgraded)
        ]
    );
    let StoreCall::Finalize { request, .. } = settle_due(&mut outbox, 2, 0).unwrap() else {
        panic!()
    };
    assert!(!request.replayable);
    // Fill the rest with small entries until nothing fits any more.
    let mut n = 3;
    loop {
        outbox.start(lease(n), 0);
        let out = outbox.hand_off(handoff(n, release(n), None), 0);
        assert!(outbox.bytes <= max, "over the bound: {}", outbox.bytes);
        if counted(&out).contains(&Metric::Outbox(OutboxEvent::Full)) {
            assert!(counted(&out).contains(&Metric::Outbox(OutboxEvent::GivenUp)));
            assert!(
                !outbox.entries.contains_key(&claim(n)),
                "not kept, not renewed"
            );
            break;
        }
        n += 1;
        assert!(n < 100, "never full");
    }
    assert_eq!(outbox.depth(), usize::try_from(n - 1).unwrap());
}

#[test]
fn gauges_return_to_zero_whatever_ends_the_deliveries() {
    let mut outbox = Outbox::new(1 << 20);
    let mut depth = 0;
    let mut bytes = 0;
    let mut track = |out: &[OutboxAction]| {
        depth += gauge(out, Gauge::OutboxDepth);
        bytes += gauge(out, Gauge::OutboxBytes);
    };
    for n in 1..=4 {
        outbox.start(lease(n), 0);
        track(&outbox.hand_off(handoff(n, finalize(n, &[b'z'; 900]), None), 0));
    }
    let out = outbox.on_tick(0);
    track(&out);
    track(&outbox.on_answer(settle(1), Ok(()), 1));
    track(&outbox.on_answer(settle(2), Err(CallError::LeaseLost), 1));
    track(&outbox.on_answer(settle(3), Err(CallError::Status(413)), 1));
    track(&outbox.on_tick(1));
    track(&outbox.on_answer(settle(3), Ok(()), 2));
    track(&outbox.on_answer(settle(4), Err(CallError::NoAnswer), 2));
    track(&outbox.on_tick(200 * SECOND));
    assert!(outbox.is_empty());
    assert_eq!((depth, bytes), (0, 0));
}

#[test]
fn a_repeated_hand_off_replaces_the_delivery_without_leaking_bytes() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(1), 0);
    let a = outbox.hand_off(handoff(1, finalize(1, &[1; 500]), None), 0);
    let b = outbox.hand_off(handoff(1, release(1), None), 0);
    assert_eq!(
        gauge(&a, Gauge::OutboxDepth) + gauge(&b, Gauge::OutboxDepth),
        1
    );
    assert_eq!(outbox.bytes, ENTRY_OVERHEAD_BYTES);
    assert_eq!(settle_due(&mut outbox, 1, 0), Some(release(1)));
}

#[test]
fn stop_never_drops_a_claim_the_outbox_owns() {
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(1), 0);
    outbox.hand_off(handoff(1, release(1), None), 0);
    outbox.stop(claim(1));
    assert_eq!(outbox.depth(), 1);
}

/// The evidence lines in `out`.
fn evidence_lines(out: &[OutboxAction]) -> Vec<&str> {
    out.iter()
        .filter_map(|a| match a {
            OutboxAction::Log { message, .. } if message.starts_with("evidence=") => {
                Some(message.as_str())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_delivery_that_lands_a_loss_and_a_give_up_are_each_one_evidence_line_with_the_fence() {
    let prefix = |event: &str, n: u128, call: &str| {
        format!(
            "evidence={event} scope={} fence={n} call={call} by=outbox | ",
            scope(n).to_hex()
        )
    };
    let mut outbox = Outbox::new(1 << 20);
    outbox.start(lease(5), 0);
    outbox.hand_off(handoff(5, finalize(5, b"{}"), None), 0);
    assert!(settle_due(&mut outbox, 5, 0).is_some());
    let landed = outbox.on_answer(settle(5), Ok(()), 1);
    assert!(
        matches!(&evidence_lines(&landed)[..], [line] if line.starts_with(&prefix("settle_landed", 5, "finalize"))),
        "{landed:?}"
    );

    outbox.start(lease(8), 0);
    outbox.hand_off(handoff(8, release(8), None), 0);
    assert!(settle_due(&mut outbox, 8, 0).is_some());
    let lost = outbox.on_answer(settle(8), Err(CallError::LeaseLost), 1);
    let release_name = "release_unknown";
    assert!(
        matches!(&evidence_lines(&lost)[..], [line] if line.starts_with(&prefix("lease_lost", 8, release_name))),
        "{lost:?}"
    );

    outbox.start(lease(9), 0);
    outbox.hand_off(handoff(9, release(9), None), 0);
    let given_up = outbox.on_tick(120 * SECOND);
    assert!(
        matches!(&evidence_lines(&given_up)[..], [line] if line.starts_with(&prefix("given_up", 9, release_name))),
        "{given_up:?}"
    );
    // A retry that fails says nothing: only facts that settle the claim are evidence.
    outbox.start(lease(4), 0);
    outbox.hand_off(handoff(4, release(4), None), 0);
    assert!(settle_due(&mut outbox, 4, 0).is_some());
    assert!(evidence_lines(&outbox.on_answer(settle(4), Err(CallError::NoAnswer), 1)).is_empty());
}
