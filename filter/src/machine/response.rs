//! The response side: the status matrix, buffering and holding a response
//! to record, and the finalize or release that settles the claim (F6, F7;
//! `docs/stream-machine.md#response-side`).

use keyflight_protocol::time::millis;
use keyflight_protocol::wire::{FinalizeRequest, ReleaseAs, ReleaseRequest, StoredResponse};

use super::{Action, Machine, Owned, State};
use crate::config::{RecordWhen, Uncertain};
use crate::edge_cache::Entry;
use crate::metrics::{EventKind, Metric, Outcome};
use crate::recorded_headers::keep_headers;
use crate::status_matrix::{Disposition, ResponseOrigin, classify};
use crate::store_call::StoreCall;

impl Machine {
    /// Response headers this stream does not record: no read needed.
    pub(super) fn response_not_recorded(&mut self) {
        match std::mem::take(&mut self.state) {
            // Our own local reply re-entering the response callbacks (or a
            // response to a stream we do not guard): pass it through.
            State::Replied => self.state = State::Replied,
            State::Start
            | State::Passthrough
            | State::BufferingRequest(_)
            | State::DigestLookup { .. }
            | State::CacheLookup(_)
            | State::Claiming(_)
            | State::AskingService { .. }
            | State::Reconciling { .. }
            | State::Upstream(_)
            | State::Delivering
            | State::Done => self.state = State::Passthrough,
            other @ (State::BufferingResponse { .. } | State::Recording { .. }) => {
                self.state = other
            }
        }
    }

    /// The response to the request this stream forwarded with its lease, as read.
    pub(super) fn response_headers(
        &mut self,
        out: &mut Vec<Action>,
        status: u16,
        headers: &[(String, Vec<u8>)],
        origin: ResponseOrigin,
        end_of_stream: bool,
    ) {
        match std::mem::take(&mut self.state) {
            State::Upstream(owned) => {
                let kept = keep_headers(
                    headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
                    &owned.policy.replay_headers,
                );
                let disposition = classify(
                    status,
                    origin,
                    &owned.policy.forget_statuses,
                    owned.policy.server_errors,
                );
                match (disposition, owned.policy.uncertain) {
                    (Disposition::Record, _) | (Disposition::Uncertain, Uncertain::Record)
                        if end_of_stream =>
                    {
                        let response = StoredResponse {
                            status,
                            headers: kept,
                            body: Vec::new(),
                        };
                        self.finalize(out, owned, response, true, true);
                    }
                    (Disposition::Record, _) | (Disposition::Uncertain, Uncertain::Record) => {
                        self.state = State::BufferingResponse {
                            owned,
                            status,
                            headers: kept,
                            buffered: 0,
                        };
                    }
                    (Disposition::Forget, _) => {
                        self.release(out, owned, ReleaseAs::Forget, Outcome::NotRecorded)
                    }
                    (Disposition::Cooldown, _) | (Disposition::Uncertain, Uncertain::Retry) => {
                        self.release(out, owned, ReleaseAs::Cooldown, Outcome::Failed)
                    }
                    (Disposition::Uncertain, Uncertain::Hold | Uncertain::Reconcile) => {
                        self.release(out, owned, ReleaseAs::Unknown, Outcome::OperationUnknown);
                    }
                }
            }
            // A read nobody asked for (the machine asks only in `Upstream`).
            other => {
                self.state = other;
                self.response_not_recorded();
            }
        }
    }

    pub(super) fn response_body_chunk(
        &mut self,
        out: &mut Vec<Action>,
        buffered: usize,
        end_of_stream: bool,
    ) {
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

    pub(super) fn response_body_chunk_end(&mut self, out: &mut Vec<Action>) {
        let size = match &self.state {
            State::BufferingResponse { buffered, .. } => *buffered,
            _ => return self.response_body_chunk(out, 0, true),
        };
        out.push(Action::ReadResponseBody { size });
    }

    pub(super) fn response_body_complete(&mut self, out: &mut Vec<Action>, body: Vec<u8>) {
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
    pub(super) fn finalize_uncacheable(&mut self, out: &mut Vec<Action>, end_of_stream: bool) {
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
    pub(super) fn finalize(
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
        if replayable && owned.policy.record == RecordWhen::AfterReply {
            let call = finalize_call(&owned, response, replayable);
            return self.record_after_reply(out, owned, call, held);
        }
        let cache = if replayable {
            // The store counts the record's retention from its claim, made
            // after this stream read the cache.
            let retention_ms = millis(owned.policy.retention);
            self.cache_entry(
                &owned.policy,
                owned.scope,
                owned.fingerprint,
                &response,
                Some(retention_ms),
            )
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

    /// `record: after_reply`: the answer goes out now and the outbox lands its
    /// finalize, renewing the lease until it does, so a retry meanwhile waits for
    /// the record as it waits for a running winner. No edge-cache entry: the
    /// cache only holds what the store acknowledged
    /// (`docs/stream-machine.md#recording-after-the-reply`).
    fn record_after_reply(
        &mut self,
        out: &mut Vec<Action>,
        owned: Owned,
        call: StoreCall,
        held: bool,
    ) {
        out.push(Action::Count(Metric::Event(EventKind::RecordedAfterReply)));
        let owner = (owned.claim_id, owned.fence);
        let note = "record: after_reply; the outbox records the answer delivered now";
        self.hand_off(out, &owned.policy, owner, call, None, note);
        if held {
            out.push(Action::ResumeResponse);
        }
        self.state = State::Delivering;
    }

    /// Releases the lease; the response waits for the answer so that a retry
    /// arriving right after it sees the released state, not a pending lease.
    pub(super) fn release(
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
    pub(super) fn record(
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
}

/// The finalize that records `response` for the claim.
pub(super) fn finalize_call(
    owned: &Owned,
    response: StoredResponse,
    replayable: bool,
) -> StoreCall {
    StoreCall::Finalize {
        scope: owned.scope,
        request: FinalizeRequest {
            claim_id: owned.claim_id,
            response,
            replayable,
            previous_scope: owned.previous_scope,
        },
    }
}

/// The release that gives the claim up as `release_as`.
pub(super) fn release_call(owned: &Owned, release_as: ReleaseAs) -> StoreCall {
    let cooldown_ms =
        (release_as == ReleaseAs::Cooldown).then(|| millis(owned.policy.failure_cooldown));
    StoreCall::Release {
        scope: owned.scope,
        request: ReleaseRequest {
            claim_id: owned.claim_id,
            release_as,
            cooldown_ms,
            previous_scope: owned.previous_scope,
        },
    }
}
