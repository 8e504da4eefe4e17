//! A herd's followers share one long-poll per worker (`docs/stream-machine.md#herds`).
//!
//! The lease-store parks a bounded number of long-polls on one scope, against one caller
//! parking thousands; a herd of same-request callers behind a few proxies must not meet
//! that bound. So a long-poll claim the root context is about to send joins one already in
//! flight that makes the same claim (same scope, fingerprint and terms): one callout is
//! outstanding per claim, and its answer is each member's too — except `won`, which is the
//! sender's alone: the other members then claim again, as one long-poll on the new winner.
//! Nothing here touches the host.

use std::collections::BTreeMap;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::ClaimResponse;

use crate::coalesce::Queued;
use crate::store_call::{Answer, StoreCall, parse_claim_answer};

/// The long-polls a worker's root context has in flight for streams, by callout token.
#[derive(Debug, Default)]
pub struct Herds {
    /// Each long-poll's token, by its claim's scope.
    by_scope: BTreeMap<Digest, Vec<u32>>,
    /// Each long-poll's claim and the calls that joined it.
    polls: BTreeMap<u32, Poll>,
}

/// One long-poll in flight: the claim it makes, and who waits on its answer besides
/// its sender.
#[derive(Debug)]
struct Poll {
    scope: Digest,
    call: StoreCall,
    members: Vec<Queued>,
}

impl Herds {
    /// Joins `queued` to a long-poll in flight making the same claim; gives it back when
    /// there is none, or when it is no long-poll claim.
    #[expect(
        clippy::result_large_err,
        reason = "the call goes back to the root context by value, once"
    )]
    pub fn join(&mut self, queued: Queued) -> Result<(), Queued> {
        let Some(scope) = long_poll_scope(&queued.call) else {
            return Err(queued);
        };
        let same = self.by_scope.get(&scope).and_then(|tokens| {
            tokens
                .iter()
                .copied()
                .find(|token| self.polls.get(token).is_some_and(|p| p.call == queued.call))
        });
        match same.and_then(|token| self.polls.get_mut(&token)) {
            Some(poll) => {
                poll.members.push(queued);
                Ok(())
            }
            None => Err(queued),
        }
    }

    /// `queued` went out alone with `token`: a long-poll claim may be joined from now on.
    pub fn sent(&mut self, token: u32, queued: &Queued) {
        let Some(scope) = long_poll_scope(&queued.call) else {
            return;
        };
        self.by_scope.entry(scope).or_default().push(token);
        self.polls.insert(
            token,
            Poll {
                scope,
                call: queued.call.clone(),
                members: Vec::new(),
            },
        );
    }

    /// The callout `token` answered: the calls that joined it, who share its answer
    /// unless [`sender_only`] says otherwise.
    pub fn answered(&mut self, token: u32) -> Vec<Queued> {
        let Some(poll) = self.polls.remove(&token) else {
            return Vec::new();
        };
        if let Some(tokens) = self.by_scope.get_mut(&poll.scope) {
            tokens.retain(|t| *t != token);
            if tokens.is_empty() {
                self.by_scope.remove(&poll.scope);
            }
        }
        poll.members
    }
}

/// The scope of a claim that allows a long-poll; `None` for any other call.
fn long_poll_scope(call: &StoreCall) -> Option<Digest> {
    match call {
        StoreCall::Claim { scope, request } if request.wait_ms.unwrap_or(0) > 0 => Some(*scope),
        _ => None,
    }
}

/// Whether a long-poll's answer belongs to its sender alone: a `won` claim is one
/// stream's lease. Every other answer — a replay, a refusal, `in_progress` after the wait,
/// a failure — is what each member's own call would have got.
pub fn sender_only(answer: &Answer) -> bool {
    parse_claim_answer(answer).is_ok_and(|a| matches!(a.response, ClaimResponse::Won { .. }))
}

#[cfg(test)]
mod tests;
