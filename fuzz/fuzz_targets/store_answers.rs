//! The filter's decoding of lease-store answers and of its edge-cache slots:
//! total on any bytes (a panic would take the Wasm VM down for every request
//! on the worker), and what decodes re-encodes to the same value.
#![no_main]

use keyflight_filter::edge_cache;
use keyflight_filter::store_call::{Answer, parse_ack_answer, parse_claim_answer, parse_status};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::ClaimAnswer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let _ = parse_status(body);
    let _ = parse_ack_answer(&Answer::Received {
        status: Some(409),
        body: body.to_vec(),
        framed: false,
    });
    let _ = parse_claim_answer(&Answer::framed(body));
    if let Ok(answer) = parse_claim_answer(&Answer::ok(body)) {
        let bytes = serde_json::to_vec(&answer).expect("wire types serialize");
        let again: ClaimAnswer = serde_json::from_slice(&bytes).expect("and parse back");
        assert_eq!(again, answer);
    }
    if let Some(slot) = edge_cache::decode(body) {
        let entry = edge_cache::Entry {
            scope: slot.scope,
            fingerprint: slot.fingerprint,
            epoch: slot.epoch,
            expires_at_ms: slot.expires_at_ms,
            response: slot.response.clone(),
        };
        assert_eq!(entry.encode_at(slot.stored_at_ms).as_deref(), Some(body));
    }
    let _ = edge_cache::lookup(Some(body), &Digest([0; 32]), &Digest([0; 32]), 1, 0);
});
