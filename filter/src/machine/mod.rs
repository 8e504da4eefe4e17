//! The sans-IO state machine for one HTTP stream (F1–F3, F5–F8, F10, F11).
//!
//! [`Machine::on`] takes one [`Event`] (what the host reported, as data) and
//! returns the [`Action`]s the adapter performs, in order. The machine never
//! calls the host and never reads a clock, so every transition is a plain
//! unit test (`machine/tests.rs`), in the shape of quinn-proto and rustls.
//!
//! The life of a guarded request:
//!
//! ```text
//! Start ─headers─▶ BufferingRequest ─body─▶ CacheLookup ─miss─▶ Claiming ─won─▶ Upstream ─response─▶ BufferingResponse
//!   │                                          │                    │                                     │
//!   └─ no policy / no key ─▶ Passthrough       └─ hit / conflict ─▶ ├─ completed ─▶ Replied (replay)      ▼
//!                                                 Replied           └─ refused ───▶ Replied (problem)  Recording ─ack─▶ Delivering
//! ```
//!
//! `CacheLookup` (F9) is skipped when the edge cache is off for the policy.
//!
//! `Replied` exists because a local reply runs this stream's response
//! callbacks again: in that state a response is our own, never an upstream
//! answer to record.

mod driver;
mod io;

use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::problem::ProblemCode;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::{
    ClaimRequest, ClaimResponse, FinalizeRequest, ReleaseAs, ReleaseRequest, StoredResponse, WonHow,
};
use keyflight_protocol::{Digest, Principal, PrincipalSource, RequestHead, Rules, Target};
use uuid::Uuid;

pub use crate::host::LogLevel;
pub use driver::{Callback, Stream, Verdict};
pub use io::{Action, Event};

use crate::config::{Anonymous, Config, FailureMode, Mode, Policy, Uncertain};
use crate::edge_cache::{self, Entry, Lookup};
use crate::encoding::{self, Accepted};
use crate::identity;
use crate::metrics::{EventKind, Metric, Outcome};
use crate::outbox::{Handoff, Lease};
use crate::problem::{LocalReply, problem_reply};
use crate::replay::{REPLAYED_HEADER, keep_headers};
use crate::router_retries;
use crate::status_matrix::{Disposition, classify};
use crate::store_call::{Answer, CallError, StoreCall, parse_ack_answer, parse_claim_answer};

/// The header carrying the claim's fence to the upstream (F3).
pub const FENCE_HEADER: &str = "idempotency-fence";

/// A guarded request whose claim has not been made yet.
#[derive(Debug)]
struct Pending {
    policy: Rc<Policy>,
    /// Everything of the head the scope and fingerprint depend on.
    head: RequestHead,
    principal: Who,
    /// What the client accepts, for a replay (F8).
    accepted: Accepted,
    buffered: usize,
}

/// The principal a request is for, owned until its scope is computed.
#[derive(Debug)]
enum Who {
    Named {
        source: Rc<PrincipalSource>,
        name: String,
    },
    AnonymousShared,
}

impl Who {
    fn principal(&self) -> Principal<'_> {
        match self {
            Who::Named { source, name } => Principal::Named { source, name },
            Who::AnonymousShared => Principal::AnonymousShared,
        }
    }
}

/// A claim this stream won.
#[derive(Debug)]
struct Owned {
    policy: Rc<Policy>,
    scope: Digest,
    fingerprint: Digest,
    claim_id: Uuid,
    /// The claim's fence: logged with a hand-off, so an operator (or a
    /// history checker) can match it with what the upstream saw.
    fence: i64,
}

/// A claim ready to be made: what the edge-cache lookup needs, and the call.
#[derive(Debug)]
struct Ready {
    policy: Rc<Policy>,
    scope: Digest,
    fingerprint: Digest,
    accepted: Accepted,
    call: StoreCall,
    timeout: Duration,
}

#[derive(Debug, Default)]
enum State {
    /// Nothing seen yet.
    #[default]
    Start,
    /// Not guarded (or no longer guarded): every callback continues.
    Passthrough,
    /// Guarded; the body is being buffered for the fingerprint (F1).
    BufferingRequest(Pending),
    /// The edge cache is being read before the claim (F9).
    CacheLookup(Ready),
    /// The claim call is in flight; the request is held (F2).
    Claiming {
        policy: Rc<Policy>,
        scope: Digest,
        fingerprint: Digest,
        accepted: Accepted,
    },
    /// The request went upstream with our lease.
    Upstream(Owned),
    /// A response to record is being buffered (F7).
    BufferingResponse {
        owned: Owned,
        status: u16,
        headers: Vec<(String, String)>,
        buffered: usize,
    },
    /// Finalize or release (`call`) is in flight; `held` while the response
    /// waits for it; `cache` is what to put in the edge cache once the record
    /// is durable. The call is kept so that the outbox can take it over if
    /// it fails or the stream ends first (F14).
    Recording {
        call: StoreCall,
        policy: Rc<Policy>,
        claim_id: Uuid,
        fence: i64,
        held: bool,
        cache: Option<(String, Entry)>,
    },
    /// The record call answered; the rest of the response flows.
    Delivering,
    /// A local reply (error or replay) was sent: response callbacks are ours.
    Replied,
    /// The stream is over.
    Done,
}

/// The state machine of one HTTP stream.
#[derive(Debug)]
pub struct Machine {
    config: Rc<Config>,
    state: State,
    /// The claim whose lease the outbox renews for this stream, until the
    /// stream settles it or hands it off.
    renewing: Option<Uuid>,
    /// The operator epoch the edge-cache read was made under (F9): entries
    /// this stream writes carry it, so an erase after it invalidates them.
    cache_epoch: Option<u64>,
}

impl Machine {
    /// A machine for a new stream.
    pub fn new(config: Rc<Config>) -> Self {
        Machine {
            config,
            state: State::Start,
            renewing: None,
            cache_epoch: None,
        }
    }

    /// Feeds one event; returns what to do, in order.
    pub fn on(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::RequestHeaders {
                headers,
                principal,
                end_of_stream,
            } => {
                self.request_headers(&mut out, &headers, principal, end_of_stream);
                out.push(self.request_verdict());
            }
            Event::RequestBodyChunk {
                buffered_bytes,
                end_of_stream,
            } => {
                self.request_body_chunk(&mut out, buffered_bytes, end_of_stream);
                out.push(self.request_verdict());
            }
            Event::RequestTrailers => {
                if let State::BufferingRequest(p) = &self.state {
                    out.push(Action::ReadRequestBody { size: p.buffered });
                }
                out.push(self.request_verdict());
            }
            Event::RequestBodyComplete { body } => self.request_body_complete(&mut out, &body),
            Event::EdgeCacheRead {
                slot,
                now_ms,
                epoch,
            } => {
                self.cache_epoch = epoch;
                self.edge_cache_read(&mut out, slot.as_deref(), now_ms);
                out.push(self.request_verdict());
            }
            Event::StoreAnswered(answer) => self.store_answered(&mut out, &answer),
            Event::ResponseHeaders { end_of_stream } => {
                if matches!(self.state, State::Upstream(_)) {
                    // The follow-up event carries this callback's verdict.
                    out.push(Action::ReadResponseHeaders { end_of_stream });
                } else {
                    self.response_not_recorded();
                    out.push(self.response_verdict());
                }
            }
            Event::ResponseHeadersRead {
                status,
                headers,
                origin,
                end_of_stream,
            } => {
                self.response_headers(&mut out, status, &headers, origin, end_of_stream);
                out.push(self.response_verdict());
            }
            Event::ResponseBodyChunk {
                buffered_bytes,
                end_of_stream,
            } => {
                self.response_body_chunk(&mut out, buffered_bytes, end_of_stream);
                out.push(self.response_verdict());
            }
            Event::ResponseTrailers => {
                self.response_body_chunk_end(&mut out);
                out.push(self.response_verdict());
            }
            Event::ResponseBodyComplete { body } => self.response_body_complete(&mut out, body),
            Event::StreamDone => self.stream_done(&mut out),
        }
        out
    }

    // ----- request phase -------------------------------------------------

    fn request_headers(
        &mut self,
        out: &mut Vec<Action>,
        headers: &[(String, Vec<u8>)],
        principal: identity::Lookup,
        end_of_stream: bool,
    ) {
        if !matches!(self.state, State::Start) {
            return;
        }
        self.state = State::Passthrough;
        // Only the filter may tell the upstream a fence: a client-sent one is
        // dropped from every request, guarded or not.
        if values(headers, FENCE_HEADER).next().is_some() {
            out.push(Action::SetRequestHeader {
                name: FENCE_HEADER.to_owned(),
                value: None,
            });
        }
        let Some(target) = Target::from_headers(headers) else {
            return;
        };
        let Some(policy) = self.config.match_policy(&target).cloned() else {
            return;
        };
        let rules = Rules {
            key_header: &self.config.key_header,
            fingerprint_headers: &policy.fingerprint_headers,
        };
        let head = match RequestHead::read(target, headers, &rules) {
            Err(e) => {
                return self.reject(out, ProblemCode::IdempotencyKeyInvalid, &e.to_string());
            }
            Ok(head) => head,
        };
        if head.key.is_none() {
            if policy.require_key {
                let detail = format!("this route requires the {} header", self.config.key_header);
                return self.reject(out, ProblemCode::IdempotencyKeyRequired, &detail);
            }
            return self.count_outcome(out, Outcome::Unguarded);
        }
        let principal = match (principal, policy.anonymous) {
            (identity::Lookup::Found { source, name }, _) => Who::Named { source, name },
            (identity::Lookup::Refused(e), _) => {
                return self.reject(out, ProblemCode::PrincipalAmbiguous, &e.to_string());
            }
            (identity::Lookup::Absent, Anonymous::Shared) => Who::AnonymousShared,
            (identity::Lookup::Absent, Anonymous::Reject) => {
                let detail = "a keyed request needs an authenticated principal";
                return self.reject(out, ProblemCode::PrincipalRequired, detail);
            }
        };
        let declared_length =
            first_text(headers, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
        if declared_length.is_some_and(|n| n > policy.max_request_body_bytes as u64) {
            return self.reject_too_large(out, &policy);
        }
        let accept_encoding: Vec<&[u8]> = values(headers, encoding::ACCEPT_ENCODING).collect();
        let pending = Pending {
            accepted: Accepted::from_values(&accept_encoding),
            policy,
            head,
            principal,
            buffered: 0,
        };
        if end_of_stream {
            self.claim(out, pending, &[]);
        } else {
            self.state = State::BufferingRequest(pending);
        }
    }

    fn request_body_chunk(&mut self, out: &mut Vec<Action>, buffered: usize, end_of_stream: bool) {
        let State::BufferingRequest(pending) = &mut self.state else {
            return;
        };
        pending.buffered = buffered;
        if buffered > pending.policy.max_request_body_bytes {
            let policy = Rc::clone(&pending.policy);
            return self.reject_too_large(out, &policy);
        }
        if end_of_stream {
            out.push(Action::ReadRequestBody { size: buffered });
        }
    }

    fn request_body_complete(&mut self, out: &mut Vec<Action>, body: &[u8]) {
        let pending = match std::mem::take(&mut self.state) {
            State::BufferingRequest(pending) => pending,
            other => {
                self.state = other;
                return;
            }
        };
        if body.len() > pending.policy.max_request_body_bytes {
            return self.reject_too_large(out, &Rc::clone(&pending.policy));
        }
        self.claim(out, pending, body);
    }

    fn claim(&mut self, out: &mut Vec<Action>, pending: Pending, body: &[u8]) {
        let policy = pending.policy;
        let identified = pending
            .head
            .identify(pending.principal.principal(), policy.scope, body);
        let fingerprint = identified.explanation.fingerprint;
        // The head was read with a key (request_headers returned otherwise).
        let Some(scope) = identified.scope else {
            return;
        };
        // F11: dry_run never holds a request up, so it never long-polls.
        let follower_wait = match self.config.mode {
            Mode::Enforce => policy.follower_wait,
            Mode::DryRun => Duration::ZERO,
        };
        let wait_ms = millis(follower_wait);
        let ready = Ready {
            call: StoreCall::Claim {
                scope,
                request: ClaimRequest {
                    fingerprint,
                    lease_ms: millis(policy.lease),
                    wait_ms: (wait_ms > 0).then_some(wait_ms),
                    retention_s: Some(policy.retention.as_secs()),
                },
            },
            // A long-poll may legitimately take the whole follower wait (F5).
            timeout: self.config.lease_store.timeout + follower_wait,
            scope,
            fingerprint,
            accepted: pending.accepted,
            policy,
        };
        match self.config.edge_cache_for(&ready.policy) {
            // F9: a hot replay needs no lease-store call; the slot is read
            // first and the answer comes back as `EdgeCacheRead`.
            Some((cache, _)) => {
                out.push(Action::ReadEdgeCache {
                    key: edge_cache::slot_key(&ready.scope, cache.slots),
                });
                self.state = State::CacheLookup(ready);
            }
            None => self.call_claim(out, ready),
        }
    }

    fn call_claim(&mut self, out: &mut Vec<Action>, ready: Ready) {
        out.push(Action::CallStore {
            call: ready.call,
            timeout: ready.timeout,
        });
        self.state = State::Claiming {
            policy: ready.policy,
            scope: ready.scope,
            fingerprint: ready.fingerprint,
            accepted: ready.accepted,
        };
    }

    /// F9: a completed record with the same fingerprint replays from the edge
    /// cache, another fingerprint is a certain conflict, anything else claims.
    /// Never in `dry_run` (the cache is off there), so a hit always replies.
    fn edge_cache_read(&mut self, out: &mut Vec<Action>, slot: Option<&[u8]>, now_ms: u64) {
        let ready = match std::mem::take(&mut self.state) {
            State::CacheLookup(ready) => ready,
            other => {
                self.state = other;
                return;
            }
        };
        let lookup = match self.cache_epoch {
            Some(epoch) => {
                edge_cache::lookup(slot, &ready.scope, &ready.fingerprint, now_ms, epoch)
            }
            // No recent word from the store on erasures: the cache may be stale.
            None => Lookup::Miss,
        };
        match lookup {
            Lookup::Miss => self.call_claim(out, ready),
            Lookup::Hit(response) => match replay(&ready.policy, response, &ready.accepted) {
                Ok(reply) => self.answer(out, reply, Outcome::ReplayEdgeCache),
                Err(Unreplayable::Encoded(coding)) => self.not_decodable(out, &coding),
                Err(Unreplayable::Malformed) => self.call_claim(out, ready),
            },
            Lookup::Conflict => {
                let code = ProblemCode::IdempotencyConflict;
                let reply = problem_reply(code, self.config.status_profile, code.title(), None);
                self.answer(out, reply, Outcome::Conflict);
            }
        }
    }

    /// The store call in flight answered: the claim while `Claiming`, the
    /// finalize or release while `Recording`. In any other state no call is in
    /// flight and the answer is nobody's.
    fn store_answered(&mut self, out: &mut Vec<Action>, answer: &Answer) {
        match self.state {
            State::Claiming { .. } => self.claim_answered(out, parse_claim_answer(answer)),
            State::Recording { .. } => self.record_answered(out, parse_ack_answer(answer)),
            _ => {}
        }
    }

    fn claim_answered(&mut self, out: &mut Vec<Action>, result: Result<ClaimResponse, CallError>) {
        let (policy, scope, fingerprint, accepted) = match std::mem::take(&mut self.state) {
            State::Claiming {
                policy,
                scope,
                fingerprint,
                accepted,
            } => (policy, scope, fingerprint, accepted),
            // An answer nobody waits for (the stream ended or replied): ignore it.
            other => {
                self.state = other;
                return;
            }
        };
        let answer = match result {
            Ok(answer) => answer,
            Err(CallError::MalformedRecord) => return self.malformed_record(out, &policy, scope),
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
                out.push(Action::StartRenewal(Lease {
                    scope,
                    claim_id,
                    lease: policy.lease,
                    interval: policy.renew_interval.min(lease / 2),
                }));
                self.renewing = Some(claim_id);
                if self.config.mode == Mode::Enforce {
                    out.push(Action::SetRequestHeader {
                        name: FENCE_HEADER.to_owned(),
                        value: Some(fence.to_string()),
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
                    fingerprint,
                    claim_id,
                    fence,
                });
            }
            ClaimResponse::Completed { response } => {
                // Followers and other proxies fill their edge cache too.
                if let Some(cache) = self.cache_entry(&policy, scope, fingerprint, &response) {
                    out.push(cache);
                }
                match replay(&policy, response, &accepted) {
                    Ok(reply) => self.answer(out, reply, Outcome::Replay),
                    Err(Unreplayable::Encoded(coding)) => self.not_decodable(out, &coding),
                    Err(Unreplayable::Malformed) => self.malformed_record(out, &policy, scope),
                }
            }
            ClaimResponse::Conflict => self.refuse(
                out,
                ProblemCode::IdempotencyConflict,
                None,
                Outcome::Conflict,
            ),
            ClaimResponse::InProgress { retry_after_s } => {
                if policy.follower_wait > Duration::ZERO {
                    out.push(Action::Count(Metric::Event(EventKind::FollowerWait)));
                }
                self.refuse(
                    out,
                    ProblemCode::RequestInProgress,
                    Some(retry_after_s),
                    Outcome::InProgressTimeout,
                );
            }
            ClaimResponse::Cooldown { retry_after_s } => {
                out.push(Action::Count(Metric::Event(EventKind::RetryableCooldown)));
                self.refuse(
                    out,
                    ProblemCode::RetryableCooldown,
                    Some(retry_after_s),
                    Outcome::Failed,
                );
            }
            ClaimResponse::NotReplayable => self.refuse(
                out,
                ProblemCode::ResponseNotReplayable,
                None,
                Outcome::NotReplayable,
            ),
            ClaimResponse::Unknown => self.refuse(
                out,
                ProblemCode::OperationUnknown,
                None,
                Outcome::OperationUnknown,
            ),
        }
    }

    /// A `completed` answer whose response cannot be read or replayed (bad
    /// base64, a status that is not final): refused as the store being
    /// unusable, never forwarded.
    fn malformed_record(&mut self, out: &mut Vec<Action>, policy: &Policy, scope: Digest) {
        out.push(Action::Log {
            level: LogLevel::Warn,
            message: format!(
                "policy {}: scope {}: the recorded response is malformed",
                policy.name,
                scope.to_hex()
            ),
        });
        self.refuse(
            out,
            ProblemCode::JournalUnavailable,
            None,
            Outcome::JournalUnavailable,
        );
    }

    /// F8: the record's body is encoded in a coding this client does not
    /// accept: refused rather than replayed as bytes it cannot read.
    fn not_decodable(&mut self, out: &mut Vec<Action>, coding: &str) {
        let code = ProblemCode::ResponseNotReplayable;
        let detail = format!(
            "the recorded response is {coding}-encoded and this request does not accept that coding"
        );
        let reply = problem_reply(code, self.config.status_profile, &detail, None);
        self.answer(out, reply, Outcome::NotReplayable);
    }

    /// The edge-cache write for a completed record, if the cache is on for
    /// `policy`, the entry fits `max_entry_bytes`, and the stream read the
    /// cache under a known operator epoch.
    fn cache_entry(
        &self,
        policy: &Policy,
        scope: Digest,
        fingerprint: Digest,
        response: &StoredResponse,
    ) -> Option<Action> {
        let (cache, ttl) = self.config.edge_cache_for(policy)?;
        let entry = Entry {
            scope,
            fingerprint,
            epoch: self.cache_epoch?,
            ttl,
            response: response.clone(),
        };
        (entry.encoded_len() <= cache.max_entry_bytes).then(|| Action::WriteEdgeCache {
            key: edge_cache::slot_key(&scope, cache.slots),
            entry,
        })
    }

    /// F2: the claim could not be made.
    fn store_failed(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        scope: Digest,
        error: CallError,
    ) {
        out.push(Action::Log {
            level: LogLevel::Warn,
            message: format!(
                "policy {}: scope {}: lease-store claim failed: {error}",
                policy.name,
                scope.to_hex()
            ),
        });
        match policy.failure_mode {
            FailureMode::Open => {
                out.push(Action::Count(Metric::Event(EventKind::FailOpen)));
                self.count_outcome(out, Outcome::Unguarded);
                out.push(Action::ResumeRequest);
                self.state = State::Passthrough;
            }
            FailureMode::Closed => self.refuse(
                out,
                ProblemCode::JournalUnavailable,
                None,
                Outcome::JournalUnavailable,
            ),
        }
    }

    // ----- response phase ------------------------------------------------

    /// Response headers this stream does not record: no read needed.
    fn response_not_recorded(&mut self) {
        match std::mem::take(&mut self.state) {
            // Our own local reply re-entering the response callbacks (or a
            // response to a stream we do not guard): pass it through.
            State::Replied => self.state = State::Replied,
            State::Start
            | State::Passthrough
            | State::BufferingRequest(_)
            | State::CacheLookup(_)
            | State::Claiming { .. }
            | State::Upstream(_)
            | State::Delivering
            | State::Done => self.state = State::Passthrough,
            other @ (State::BufferingResponse { .. } | State::Recording { .. }) => {
                self.state = other
            }
        }
    }

    /// The response to the request this stream forwarded with its lease, as read.
    fn response_headers(
        &mut self,
        out: &mut Vec<Action>,
        status: u16,
        headers: &[(String, Vec<u8>)],
        origin: crate::status_matrix::ResponseOrigin,
        end_of_stream: bool,
    ) {
        match std::mem::take(&mut self.state) {
            State::Upstream(owned) => {
                let kept = keep_headers(
                    headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
                    &owned.policy.replay_headers,
                );
                match classify(status, origin) {
                    Disposition::Record if end_of_stream => {
                        let response = StoredResponse {
                            status,
                            headers: kept,
                            body: Vec::new(),
                        };
                        self.finalize(out, owned, response, true, true);
                    }
                    Disposition::Record => {
                        self.state = State::BufferingResponse {
                            owned,
                            status,
                            headers: kept,
                            buffered: 0,
                        };
                    }
                    Disposition::Forget => {
                        self.release(out, owned, ReleaseAs::Forget, Outcome::NotRecorded)
                    }
                    Disposition::Cooldown => {
                        self.release(out, owned, ReleaseAs::Cooldown, Outcome::Failed)
                    }
                    Disposition::Uncertain => match owned.policy.uncertain {
                        Uncertain::Retry => {
                            self.release(out, owned, ReleaseAs::Cooldown, Outcome::Failed)
                        }
                        Uncertain::Hold => {
                            self.release(out, owned, ReleaseAs::Unknown, Outcome::OperationUnknown);
                        }
                    },
                }
            }
            // A read nobody asked for (the machine asks only in `Upstream`).
            other => {
                self.state = other;
                self.response_not_recorded();
            }
        }
    }

    fn response_body_chunk(&mut self, out: &mut Vec<Action>, buffered: usize, end_of_stream: bool) {
        match &mut self.state {
            State::BufferingResponse {
                buffered: so_far,
                owned,
                ..
            } => {
                *so_far = buffered;
                if buffered > owned.policy.max_cacheable_response_bytes {
                    return self.finalize_uncacheable(out, end_of_stream);
                }
                if end_of_stream {
                    out.push(Action::ReadResponseBody { size: buffered });
                }
            }
            // The response streams while an uncacheable finalize is in flight;
            // its last chunk waits for the answer so the stream (and with it
            // the callout) does not end first.
            State::Recording { held, .. } if end_of_stream => *held = true,
            _ => {}
        }
    }

    fn response_body_chunk_end(&mut self, out: &mut Vec<Action>) {
        let size = match &self.state {
            State::BufferingResponse { buffered, .. } => *buffered,
            _ => return self.response_body_chunk(out, 0, true),
        };
        out.push(Action::ReadResponseBody { size });
    }

    fn response_body_complete(&mut self, out: &mut Vec<Action>, body: Vec<u8>) {
        let (owned, status, headers) = match std::mem::take(&mut self.state) {
            State::BufferingResponse {
                owned,
                status,
                headers,
                ..
            } => (owned, status, headers),
            other => {
                self.state = other;
                return;
            }
        };
        if body.len() > owned.policy.max_cacheable_response_bytes {
            self.state = State::BufferingResponse {
                owned,
                status,
                headers,
                buffered: body.len(),
            };
            return self.finalize_uncacheable(out, true);
        }
        let response = StoredResponse {
            status,
            headers,
            body,
        };
        self.finalize(out, owned, response, true, true);
    }

    /// F6: a success too large to keep is completed, not replayable, with an
    /// empty body; the caller still gets the whole response, streamed.
    fn finalize_uncacheable(&mut self, out: &mut Vec<Action>, end_of_stream: bool) {
        let State::BufferingResponse {
            owned,
            status,
            headers,
            ..
        } = std::mem::take(&mut self.state)
        else {
            return;
        };
        let response = StoredResponse {
            status,
            headers,
            body: Vec::new(),
        };
        self.finalize(out, owned, response, false, end_of_stream);
    }

    /// Records the response; a replayable one also goes to the edge cache
    /// once the store has acknowledged it (F9: the cache never holds a
    /// record the store does not).
    fn finalize(
        &mut self,
        out: &mut Vec<Action>,
        owned: Owned,
        response: StoredResponse,
        replayable: bool,
        held: bool,
    ) {
        let outcome = if replayable {
            Outcome::WonCompleted
        } else {
            Outcome::CompletedUncacheable
        };
        self.count_outcome(out, outcome);
        let cache = if replayable {
            self.cache_entry(&owned.policy, owned.scope, owned.fingerprint, &response)
                .and_then(|action| match action {
                    Action::WriteEdgeCache { key, entry } => Some((key, entry)),
                    _ => None,
                })
        } else {
            None
        };
        let call = finalize_call(&owned, response, replayable);
        self.record(out, owned, call, held, cache);
    }

    /// Releases the lease; the response waits for the answer so that a retry
    /// arriving right after it sees the released state, not a pending lease.
    fn release(
        &mut self,
        out: &mut Vec<Action>,
        owned: Owned,
        release_as: ReleaseAs,
        outcome: Outcome,
    ) {
        self.count_outcome(out, outcome);
        let call = release_call(&owned, release_as);
        self.record(out, owned, call, true, None);
    }

    /// Makes the settle call from this stream; its answer resumes the response.
    fn record(
        &mut self,
        out: &mut Vec<Action>,
        owned: Owned,
        call: StoreCall,
        held: bool,
        cache: Option<(String, Entry)>,
    ) {
        out.push(Action::CallStore {
            call: call.clone(),
            timeout: self.config.lease_store.timeout,
        });
        self.state = State::Recording {
            call,
            policy: owned.policy,
            claim_id: owned.claim_id,
            fence: owned.fence,
            held,
            cache,
        };
    }

    /// F7: the record call answered; whatever it said, the caller gets its
    /// response. A transient failure hands the call to the outbox (F14),
    /// which keeps the lease and resends it; the caller is not held longer.
    fn record_answered(&mut self, out: &mut Vec<Action>, result: Result<(), CallError>) {
        let State::Recording {
            call,
            policy,
            claim_id,
            fence,
            held,
            cache,
        } = std::mem::take(&mut self.state)
        else {
            return;
        };
        // A recording stream's call is its finalize or its release.
        let error_event = match call {
            StoreCall::Release { .. } => EventKind::ReleaseError,
            _ => EventKind::FinalizeError,
        };
        match result {
            Ok(()) => {
                self.stop_renewal(out);
                if let Some((key, entry)) = cache {
                    out.push(Action::WriteEdgeCache { key, entry });
                }
            }
            Err(CallError::LeaseLost) => {
                // Before StopRenewal: the outbox still knows whether a renew
                // already counted this theft.
                out.push(Action::LeaseLost { claim_id });
                self.stop_renewal(out);
                out.push(Action::Log {
                    level: LogLevel::Warn,
                    message: format!(
                        "{}: the lease was stolen; delivering the response unrecorded",
                        call.name()
                    ),
                });
            }
            Err(error) => {
                out.push(Action::Count(Metric::Event(error_event)));
                out.push(Action::Log {
                    level: LogLevel::Warn,
                    message: format!(
                        "scope {} fence {fence}: {} failed: {error}; delivering the response, \
                         the outbox keeps the lease and retries",
                        call.scope().to_hex(),
                        call.name()
                    ),
                });
                self.hand_off(out, &policy, claim_id, call, Some(error));
            }
        }
        if held {
            out.push(Action::ResumeResponse);
        }
        self.state = State::Delivering;
    }

    /// The stream ended (`on_log`/`on_done`). A claim it won and has not
    /// settled passes to the outbox (F14) instead of being forgotten:
    /// forgetting it would leave the record pending until the lease runs
    /// out, and the next same-body retry would run the operation again.
    fn stream_done(&mut self, out: &mut Vec<Action>) {
        match std::mem::take(&mut self.state) {
            // The caller left while the upstream ran: Envoy resets the
            // upstream request, so whether it acted is unknown (F6 uncertain).
            State::Upstream(owned) => {
                let (release_as, outcome) = match owned.policy.uncertain {
                    Uncertain::Retry => (ReleaseAs::Cooldown, Outcome::Failed),
                    Uncertain::Hold => (ReleaseAs::Unknown, Outcome::OperationUnknown),
                };
                self.count_outcome(out, outcome);
                out.push(Action::Count(Metric::Event(EventKind::CallerGone)));
                let call = release_call(&owned, release_as);
                self.hand_off(out, &owned.policy, owned.claim_id, call, None);
            }
            // The upstream answered a recordable status, and the caller left
            // before its whole body was read: the operation happened, but
            // there is no answer to replay. Completed, not replayable: a
            // retry gets 409 `response_not_replayable`, never a second run.
            State::BufferingResponse {
                owned,
                status,
                headers,
                ..
            } => {
                self.count_outcome(out, Outcome::CompletedUncacheable);
                out.push(Action::Count(Metric::Event(EventKind::CallerGone)));
                let response = StoredResponse {
                    status,
                    headers,
                    body: Vec::new(),
                };
                let call = finalize_call(&owned, response, false);
                self.hand_off(out, &owned.policy, owned.claim_id, call, None);
            }
            // The settle call was in flight: it is cancelled with the stream,
            // and may or may not have landed. The store takes a repeat.
            State::Recording {
                call,
                policy,
                claim_id,
                ..
            } => self.hand_off(out, &policy, claim_id, call, None),
            _ => self.stop_renewal(out),
        }
        self.state = State::Done;
    }

    /// Passes the claim and its settle call to the outbox (F14).
    fn hand_off(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        claim_id: Uuid,
        call: StoreCall,
        last_error: Option<CallError>,
    ) {
        self.renewing = None;
        out.push(Action::HandOff(Handoff {
            claim_id,
            call,
            last_error,
            budget: policy.record_retry_budget,
        }));
    }

    // ----- shared helpers ------------------------------------------------

    /// The return value of a request callback.
    fn request_verdict(&self) -> Action {
        match self.state {
            State::BufferingRequest(_)
            | State::CacheLookup(_)
            | State::Claiming { .. }
            | State::Replied => Action::PauseRequest,
            _ => Action::ContinueRequest,
        }
    }

    /// The return value of a response callback.
    fn response_verdict(&self) -> Action {
        match self.state {
            State::BufferingResponse { .. } | State::Recording { held: true, .. } => {
                Action::PauseResponse
            }
            _ => Action::ContinueResponse,
        }
    }

    /// A refusal during a request callback (bad key, no principal, too large).
    fn reject(&mut self, out: &mut Vec<Action>, code: ProblemCode, detail: &str) {
        if self.config.mode == Mode::DryRun {
            out.push(Action::Count(Metric::DryRun(Outcome::RejectedInvalid)));
            self.state = State::Passthrough;
            return;
        }
        let reply = problem_reply(code, self.config.status_profile, detail, None);
        out.push(Action::Reply(reply));
        out.push(Action::Count(Metric::Outcome(Outcome::RejectedInvalid)));
        self.state = State::Replied;
    }

    fn reject_too_large(&mut self, out: &mut Vec<Action>, policy: &Policy) {
        let detail = format!(
            "the request body exceeds {} bytes",
            policy.max_request_body_bytes
        );
        self.reject(out, ProblemCode::PayloadTooLarge, &detail);
    }

    /// A refusal after the claim answered (the request is paused).
    fn refuse(
        &mut self,
        out: &mut Vec<Action>,
        code: ProblemCode,
        retry_after_s: Option<u64>,
        outcome: Outcome,
    ) {
        let reply = problem_reply(
            code,
            self.config.status_profile,
            code.title(),
            retry_after_s,
        );
        self.answer(out, reply, outcome);
    }

    /// Sends `reply` (enforce) or lets the request through and counts what
    /// would have happened (dry run: never block, never replay). Called from
    /// a claim answer, outside any request callback, so a dry run resumes.
    fn answer(&mut self, out: &mut Vec<Action>, reply: LocalReply, outcome: Outcome) {
        self.count_outcome(out, outcome);
        if self.config.mode == Mode::DryRun {
            out.push(Action::ResumeRequest);
            self.state = State::Passthrough;
        } else {
            out.push(Action::Reply(reply));
            self.state = State::Replied;
        }
    }

    fn count_outcome(&self, out: &mut Vec<Action>, outcome: Outcome) {
        out.push(Action::Count(match self.config.mode {
            Mode::Enforce => Metric::Outcome(outcome),
            Mode::DryRun => Metric::DryRun(outcome),
        }));
    }

    fn stop_renewal(&mut self, out: &mut Vec<Action>) {
        if let Some(claim_id) = self.renewing.take() {
            out.push(Action::StopRenewal { claim_id });
        }
    }
}

/// Why a recorded response is not replayed.
#[derive(Debug)]
enum Unreplayable {
    /// Its status is not a final HTTP status.
    Malformed,
    /// Its body is in this coding, which the asking client does not accept.
    Encoded(String),
}

/// F8: a local reply from a recorded response, for a client that accepts
/// `accepted`. Takes the response by value: its body becomes the reply's
/// body without a copy.
fn replay(
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

/// The finalize that records `response` for the claim.
fn finalize_call(owned: &Owned, response: StoredResponse, replayable: bool) -> StoreCall {
    StoreCall::Finalize {
        scope: owned.scope,
        request: FinalizeRequest {
            claim_id: owned.claim_id,
            response,
            replayable,
        },
    }
}

/// The release that gives the claim up as `release_as`.
fn release_call(owned: &Owned, release_as: ReleaseAs) -> StoreCall {
    let cooldown_ms =
        (release_as == ReleaseAs::Cooldown).then(|| millis(owned.policy.failure_cooldown));
    StoreCall::Release {
        scope: owned.scope,
        request: ReleaseRequest {
            claim_id: owned.claim_id,
            release_as,
            cooldown_ms,
        },
    }
}

fn won_event(how: WonHow) -> EventKind {
    match how {
        WonHow::Claimed => EventKind::Claimed,
        WonHow::RecoveredTtl => EventKind::RecoveredTtl,
        WonHow::RecoveredAbandoned => EventKind::RecoveredAbandoned,
    }
}

/// Every value of header `name`, in order.
fn values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// The first value of header `name`, if it is UTF-8.
fn first_text(headers: &[(String, Vec<u8>)], name: &str) -> Option<String> {
    values(headers, name)
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests;
