//! The claim's answer: forward the request with the lease, replay a
//! completed record, refuse, or fail closed (or open) when the store cannot
//! answer (F2, F3, F8, F9; `docs/stream-machine.md#the-claim`).

use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::problem::ProblemCode;
use keyflight_protocol::time::millis;
use std::rc::Rc;

use keyflight_protocol::wire::{
    ClaimAnswer, ClaimResponse, ReleaseAs, ReleaseRequest, StoredResponse, WonHow,
};
use uuid::Uuid;

use super::{Action, FENCE_HEADER, LogLevel, Machine, Owned, SCOPE_HEADER, State};
use crate::config::{FailureMode, Mode, Policy};
use crate::edge_cache::{self, Entry};
use crate::encoding;
use crate::log::{By, Repeating, Settle, evidence};
use crate::metrics::{EventKind, Metric, Outcome};
use crate::outbox::Lease;
use crate::problem::problem_reply;
use crate::replay::{Unreplayable, replay};
use crate::router_retries;
use crate::store_call::{Answer, CallError, StoreCall, parse_ack_answer, parse_claim_answer};

impl Machine {
    /// The store call in flight answered: the claim while `Claiming`, the
    /// finalize or release while `Recording`. In any other state no call is in
    /// flight and the answer is nobody's.
    pub(super) fn store_answered(
        &mut self,
        out: &mut Vec<Action>,
        answer: &Answer,
        elapsed_ms: u64,
    ) {
        match self.state {
            State::Claiming(_) => {
                self.claim_answered(out, parse_claim_answer(answer), elapsed_ms);
            }
            State::Recording { .. } => self.settle_answered(out, parse_ack_answer(answer)),
            State::Reconciling { .. } => self.reconciled_answered(out, parse_ack_answer(answer)),
            _ => {}
        }
    }

    pub(super) fn claim_answered(
        &mut self,
        out: &mut Vec<Action>,
        result: Result<ClaimAnswer, CallError>,
        elapsed_ms: u64,
    ) {
        let ready = match std::mem::take(&mut self.state) {
            State::Claiming(ready) => ready,
            // An answer nobody waits for (the stream ended or replied): ignore it.
            other => {
                self.state = other;
                return;
            }
        };
        let (policy, scope, previous_scope, fingerprint) = (
            Rc::clone(&ready.policy),
            ready.scope,
            ready.previous_scope,
            ready.fingerprint,
        );
        let ClaimAnswer {
            response: answer,
            record_expires_in_ms: record_life_ms,
            claimed_after_ms,
        } = match result {
            Ok(answer) => answer,
            Err(CallError::MalformedRecord) => return self.malformed_record(out, &policy, scope),
            Err(CallError::Status(400)) if previous_scope.is_some() => {
                return self.previous_recipe_refused(out, &policy, scope);
            }
            Err(error) => return self.store_failed(out, &policy, scope, error),
        };
        match answer {
            ClaimResponse::Won {
                claim_id,
                fence,
                how,
                lease_ms,
            } => {
                out.push(Action::Count(Metric::Event(won_event(how))));
                let lease = Duration::from_millis(lease_ms.max(1));
                // The lease started at the commit: the round trip minus the store's
                // time before it bounds the lease's age from above.
                let age =
                    Duration::from_millis(elapsed_ms.saturating_sub(claimed_after_ms.unwrap_or(0)));
                if age > self.trusted_claim_age(lease) {
                    return self.answered_too_late(
                        out,
                        &policy,
                        (scope, previous_scope),
                        (claim_id, fence),
                        age,
                    );
                }
                out.push(Action::StartRenewal(Lease {
                    scope,
                    previous_scope,
                    claim_id,
                    lease: policy.lease,
                    interval: policy.renew_interval.min(lease / 2),
                    age,
                }));
                self.renewing = Some(claim_id);
                if self.config.mode == Mode::Enforce {
                    out.push(Action::SetRequestHeader {
                        name: FENCE_HEADER.to_owned(),
                        value: Some(fence.to_string()),
                    });
                    out.push(Action::SetRequestHeader {
                        name: SCOPE_HEADER.to_owned(),
                        value: Some(scope.to_hex()),
                    });
                    // F8: the answer is recorded for every client that asks
                    // again, so it must not be encoded for this one.
                    out.push(Action::SetRequestHeader {
                        name: encoding::ACCEPT_ENCODING.to_owned(),
                        value: Some(encoding::IDENTITY.to_owned()),
                    });
                    // F15: the router must not resend what the claim let through.
                    for (name, value) in router_retries::header_edits(policy.router_retries) {
                        out.push(Action::SetRequestHeader {
                            name: name.to_owned(),
                            value: value.map(str::to_owned),
                        });
                    }
                }
                out.push(Action::ResumeRequest);
                self.state = State::Upstream(Owned {
                    policy,
                    scope,
                    previous_scope,
                    fingerprint,
                    claim_id,
                    fence,
                });
            }
            ClaimResponse::Completed { response } => {
                // Followers and other proxies fill their edge cache too.
                if let Some(cache) =
                    self.cache_entry(&policy, scope, fingerprint, &response, record_life_ms)
                {
                    out.push(cache);
                }
                match replay(&policy, response, &ready.accepted) {
                    Ok(reply) => self.reply_to_held_request(out, reply, Outcome::Replay),
                    Err(Unreplayable::Encoded(coding)) => self.not_decodable(out, &coding),
                    Err(Unreplayable::Malformed) => self.malformed_record(out, &policy, scope),
                }
            }
            ClaimResponse::Conflict => self.refuse_held_request(
                out,
                &policy,
                ProblemCode::IdempotencyConflict,
                None,
                Outcome::Conflict,
            ),
            ClaimResponse::InProgress { retry_after_s } => {
                if policy.follower_wait > Duration::ZERO {
                    out.push(Action::Count(Metric::Event(EventKind::FollowerWait)));
                }
                self.refuse_held_request(
                    out,
                    &policy,
                    ProblemCode::RequestInProgress,
                    Some(retry_after_s),
                    Outcome::InProgressTimeout,
                );
            }
            ClaimResponse::Cooldown { retry_after_s } => {
                out.push(Action::Count(Metric::Event(EventKind::RetryableCooldown)));
                self.refuse_held_request(
                    out,
                    &policy,
                    ProblemCode::RetryableCooldown,
                    Some(retry_after_s),
                    Outcome::Failed,
                );
            }
            ClaimResponse::NotReplayable => self.refuse_held_request(
                out,
                &policy,
                ProblemCode::ResponseNotReplayable,
                None,
                Outcome::NotReplayable,
            ),
            ClaimResponse::Unknown { fence: Some(fence) }
                if policy.reconcile.is_some()
                    && !self.asked_service
                    && self.config.mode == Mode::Enforce =>
            {
                self.ask_service(out, ready, fence);
            }
            ClaimResponse::Unknown { fence } => self.operation_unknown(out, &policy, fence),
        }
    }

    /// A `completed` answer whose response cannot be read or replayed (bad
    /// base64, a status that is not final): refused as the store being
    /// unusable, never forwarded.
    pub(super) fn malformed_record(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        scope: Digest,
    ) {
        out.push(Action::Log {
            level: LogLevel::Warn,
            message: format!(
                "policy {}: scope {}: the recorded response is malformed",
                policy.name,
                scope.to_hex()
            ),
        });
        self.refuse_held_request(
            out,
            policy,
            ProblemCode::JournalUnavailable,
            None,
            Outcome::JournalUnavailable,
        );
    }

    /// F8: the record's body is encoded in a coding this client does not
    /// accept: refused rather than replayed as bytes it cannot read.
    pub(super) fn not_decodable(&mut self, out: &mut Vec<Action>, coding: &str) {
        let code = ProblemCode::ResponseNotReplayable;
        let detail = format!(
            "the recorded response is {coding}-encoded and this request does not accept that coding"
        );
        let reply = problem_reply(
            code,
            code.status_under(self.config.status_profile),
            &detail,
            None,
        );
        self.reply_to_held_request(out, reply, Outcome::NotReplayable);
    }

    /// The edge-cache write for a completed record, if the cache is on for
    /// `policy`, the entry fits `max_entry_bytes`, the stream read the cache
    /// under a known operator epoch, and the record's retention is known to
    /// last `record_life_ms` from that read (`None`: not known, not cached).
    /// The entry is served until the TTL or that, whichever ends first, so no
    /// edge replays a record the store may have deleted or reused
    /// (`docs/stream-machine.md#the-edge-cache`).
    pub(super) fn cache_entry(
        &self,
        policy: &Policy,
        scope: Digest,
        fingerprint: Digest,
        response: &StoredResponse,
        record_life_ms: Option<u64>,
    ) -> Option<Action> {
        let (cache, ttl) = self.config.edge_cache_for(policy)?;
        let life_ms = millis(ttl).min(record_life_ms?);
        // Sized before the entry copies the response: most large records
        // never fit, and copying one just to drop it costs on every replay.
        if Entry::encoded_len_of(response) > cache.max_entry_bytes {
            return None;
        }
        let entry = Entry {
            scope,
            fingerprint,
            epoch: self.cache_epoch?,
            expires_at_ms: self.cache_read_ms.saturating_add(life_ms),
            response: response.clone(),
        };
        Some(Action::WriteEdgeCache {
            key: edge_cache::slot_key(&scope, cache.slots),
            entry,
        })
    }

    /// F2: the claim could not be made.
    pub(super) fn store_failed(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        scope: Digest,
        error: CallError,
    ) {
        out.push(Action::WarnRepeating {
            kind: Repeating::ClaimFailed,
            message: format!(
                "policy {}: scope {}: lease-store claim failed: {error}",
                policy.name,
                scope.to_hex()
            ),
        });
        self.claim_failed(out, policy);
    }

    /// A store that predates recipe transitions refuses a claim naming the previous recipe
    /// (an unknown field). Claiming one scope would break the promise to proxies on the other
    /// recipe, and passing the request unguarded would too, so it is refused whatever the
    /// policy's `failure_mode` (`docs/operations.md#upgrades`: the store rolls out first).
    fn previous_recipe_refused(&mut self, out: &mut Vec<Action>, policy: &Policy, scope: Digest) {
        out.push(Action::WarnRepeating {
            kind: Repeating::PreviousRecipeRefused,
            message: format!(
                "policy {}: scope {}: the lease-store refused a claim naming the policy's \
                 previous recipe (400): it predates recipe transitions; roll the lease-store \
                 out before a filter whose policy names a previous recipe",
                policy.name,
                scope.to_hex()
            ),
        });
        self.refuse_held_request(
            out,
            policy,
            ProblemCode::JournalUnavailable,
            None,
            Outcome::JournalUnavailable,
        );
    }

    /// The claim did not give this stream a lease it can use: the policy's
    /// `failure_mode` says whether the request goes through unguarded (F2).
    fn claim_failed(&mut self, out: &mut Vec<Action>, policy: &Policy) {
        match policy.failure_mode {
            FailureMode::Open => {
                out.push(Action::Count(Metric::Event(EventKind::FailOpen)));
                self.count_outcome(out, Outcome::Unguarded);
                out.push(Action::ResumeRequest);
                self.state = State::Passthrough;
            }
            FailureMode::Closed => self.refuse_held_request(
                out,
                policy,
                ProblemCode::JournalUnavailable,
                None,
                Outcome::JournalUnavailable,
            ),
        }
    }
}

impl Machine {
    /// How old a won claim's answer may be for its lease to be kept: a renew
    /// sent when it arrives, and its retry, must still land within the lease,
    /// which the store started no earlier than the claim was sent
    /// (`docs/stream-machine.md#the-claim`; the renew rule itself is
    /// `docs/record-outbox.md#renewal`).
    fn trusted_claim_age(&self, lease: Duration) -> Duration {
        let renew_and_retry = self.config.lease_store.timeout * 2
            + Duration::from_millis(crate::config::RENEW_RETRY_SLACK_MS);
        lease.saturating_sub(renew_and_retry)
    }

    /// A won claim whose answer came too late to keep its lease (a store
    /// frozen after it committed, a link that held the answer back): another
    /// proxy may own the lease already, so the request is not forwarded. It
    /// never ran, so the outbox releases the claim as `forget` (a retry may
    /// claim at once), and the caller gets what a failed claim gets.
    fn answered_too_late(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Rc<Policy>,
        (scope, previous_scope): (Digest, Option<Digest>),
        (claim_id, fence): (Uuid, i64),
        age: Duration,
    ) {
        out.push(Action::Count(Metric::Event(EventKind::ClaimAnsweredLate)));
        let release = StoreCall::Release {
            scope,
            request: ReleaseRequest {
                claim_id,
                release_as: ReleaseAs::Forget,
                cooldown_ms: None,
                previous_scope,
            },
        };
        let why = format!(
            "policy {}: the claim was answered {} ms after it was sent, too late to keep \
             its lease: the request is not forwarded",
            policy.name,
            millis(age)
        );
        out.push(Action::Log {
            level: LogLevel::Warn,
            message: evidence(Settle::NotForwarded, &release, fence, By::Stream, &why),
        });
        let note = "the outbox releases a claim answered too late to forward";
        self.hand_off(out, policy, (claim_id, fence), release, None, note);
        self.claim_failed(out, policy);
    }
}

fn won_event(how: WonHow) -> EventKind {
    match how {
        WonHow::Claimed => EventKind::Claimed,
        WonHow::RecoveredTtl => EventKind::RecoveredTtl,
        WonHow::RecoveredAbandoned => EventKind::RecoveredAbandoned,
    }
}
