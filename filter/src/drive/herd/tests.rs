use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, WonHow};

use super::{Herds, sender_only};
use crate::coalesce::Queued;
use crate::store_call::{Answer, StoreCall};

fn claim(stream: u32, fingerprint: u8, wait_ms: Option<u64>) -> Queued {
    Queued {
        stream,
        call: StoreCall::Claim {
            scope: Digest([7; 32]),
            request: ClaimRequest {
                fingerprint: Digest([fingerprint; 32]),
                lease_ms: 30_000,
                wait_ms,
                retention_s: None,
                previous: None,
                at_most_once: false,
            },
        },
        timeout: Duration::from_secs(1),
    }
}

#[test]
fn the_same_long_poll_claim_joins_the_one_in_flight_until_it_answers() {
    let mut herds = Herds::default();
    let first = claim(1, 1, Some(5_000));
    assert!(herds.join(first.clone()).is_err(), "nothing to join yet");
    herds.sent(40, &first);
    assert_eq!(herds.join(claim(2, 1, Some(5_000))), Ok(()));
    assert_eq!(herds.join(claim(3, 1, Some(5_000))), Ok(()));

    let members: Vec<u32> = herds.answered(40).iter().map(|q| q.stream).collect();
    assert_eq!(members, [2, 3]);
    assert!(
        herds.join(claim(4, 1, Some(5_000))).is_err(),
        "an answered long-poll is joined no more"
    );
}

#[test]
fn another_fingerprint_or_a_claim_that_does_not_wait_is_never_grouped() {
    let mut herds = Herds::default();
    let first = claim(1, 1, Some(5_000));
    herds.sent(40, &first);
    assert!(herds.join(claim(2, 2, Some(5_000))).is_err());
    assert!(herds.join(claim(3, 1, Some(1_000))).is_err(), "other terms");
    assert!(herds.join(claim(4, 1, None)).is_err(), "no long-poll");
    assert!(herds.answered(40).is_empty());
}

#[test]
fn only_a_won_claim_is_the_senders_alone() {
    let won = ClaimResponse::Won {
        claim_id: uuid::Uuid::from_u128(1),
        fence: 1,
        how: WonHow::Claimed,
        lease_ms: 30_000,
    };
    let running = ClaimResponse::InProgress { retry_after_s: 1 };
    assert!(sender_only(&Answer::ok(serde_json::to_vec(&won).unwrap())));
    assert!(!sender_only(&Answer::ok(
        serde_json::to_vec(&running).unwrap()
    )));
    assert!(!sender_only(&Answer::NotSent));
}
