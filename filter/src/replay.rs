//! F8: the local reply that replays a recorded response
//! (`docs/stream-machine.md#replays`).
//!
//! A record replays with its status, its body and the headers that pass the
//! policy's allowlist again ([`crate::recorded_headers`]), plus
//! `idempotent-replayed: true` — and only to a client that can decode it: a
//! body recorded with a `content-encoding` the asking client does not accept
//! is refused rather than replayed as bytes it cannot read.

use keyflight_protocol::wire::StoredResponse;

use crate::config::Policy;
use crate::encoding::Accepted;
use crate::problem::LocalReply;
use crate::recorded_headers::{REPLAYED_HEADER, keep_headers};

/// Why a recorded response is not replayed.
#[derive(Debug)]
pub enum Unreplayable {
    /// Its status is not a final HTTP status.
    Malformed,
    /// Its body is in this coding, which the asking client does not accept.
    Encoded(String),
}

/// F8: a local reply from a recorded response, for a client that accepts
/// `accepted`. Takes the response by value: its body becomes the reply's
/// body without a copy.
pub fn replay(
    policy: &Policy,
    response: StoredResponse,
    accepted: &Accepted,
) -> Result<LocalReply, Unreplayable> {
    if !(200..=599).contains(&response.status) {
        return Err(Unreplayable::Malformed);
    }
    let coding = response
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-encoding"))
        .map(|(_, value)| value.as_str());
    if !accepted.decodes(coding) {
        return Err(Unreplayable::Encoded(coding.unwrap_or_default().to_owned()));
    }
    let mut headers = keep_headers(
        response
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes())),
        &policy.replay_headers,
    );
    headers.push((REPLAYED_HEADER.to_owned(), "true".to_owned()));
    Ok(LocalReply {
        status: response.status,
        headers,
        body: response.body,
    })
}
