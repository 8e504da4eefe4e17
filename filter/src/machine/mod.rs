//! The sans-IO state machine for one HTTP stream (F1–F3, F5–F8, F10, F11;
//! `docs/stream-machine.md`).
//!
//! [`Machine::on`] takes one [`Event`] (what the host reported, as data) and
//! returns the [`Action`]s to perform, in order. The machine never calls the
//! host and never reads a clock; [`crate::drive::stream::Stream`] runs it over the
//! [`crate::drive::host::Host`] trait, in the shape of quinn-proto and rustls, and
//! the tests drive that same driver over a fake host (`tests/`).
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
//!
//! The transitions live one seam per file: the request side up to the claim
//! (`request.rs`), the claim's answer (`claim_answer.rs`), asking the service about an
//! `unknown` record (`reconcile.rs`), the response side
//! up to the settle call (`response.rs`), settling the claim or handing it
//! to the outbox (`settle.rs`), and the local replies (`replies.rs`). This
//! file holds the states, the dispatch of events, and the verdicts.

mod claim_answer;
mod io;
mod reconcile;
mod replies;
mod request;
mod response;
mod settle;

use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::{Digest, Party, Principal, PrincipalSource, RequestHead};
use uuid::Uuid;

pub use io::{Action, Event};

use crate::body_memo::RawDigest;
use crate::config::{Config, Mode, Policy};
use crate::edge_cache::Entry;
use crate::encoding::Accepted;
use crate::identity;
use crate::log::LogLevel;
use crate::metrics::{Metric, Outcome};
use crate::reconcile::Settled;
use crate::store_call::StoreCall;

/// The header carrying the claim's fence to the upstream (F3).
pub const FENCE_HEADER: &str = "idempotency-fence";

/// The header carrying the claim's scope (hex) to the upstream with the fence, so a
/// service can record its effect under it (F3; `docs/effects.md#what-the-filter-forwards`).
pub const SCOPE_HEADER: &str = "idempotency-scope";

/// The headers only the filter may send upstream: a client-sent copy is dropped from
/// every request, guarded or not.
const FILTER_ONLY_HEADERS: [&str; 2] = [FENCE_HEADER, SCOPE_HEADER];

/// A guarded request whose claim has not been made yet.
#[derive(Debug, Clone)]
struct Pending {
    policy: Rc<Policy>,
    /// Everything of the head the scope and fingerprint depend on.
    head: RequestHead,
    principal: Who,
    /// The principal under `identity.previous`: `None` when it is not configured (the
    /// previous recipe reads the same principal), `Some(None)` when the previous sources
    /// name none a proxy on them would accept (no record can exist under them).
    previous_principal: Option<Option<Who>>,
    /// What the client accepts, for a replay (F8).
    accepted: Accepted,
    buffered: usize,
}

/// The principal a request is for, owned until its scope is computed.
#[derive(Debug, Clone)]
enum Who {
    Named {
        source: Rc<PrincipalSource>,
        name: String,
    },
    Delegated {
        subject: identity::Named,
        actor: identity::Named,
    },
    AnonymousShared,
}

impl Who {
    /// The principal a lookup names; `None` when it names none.
    fn found(lookup: identity::Lookup) -> Option<Self> {
        match lookup {
            identity::Lookup::Found { source, name } => Some(Who::Named { source, name }),
            identity::Lookup::Delegated { subject, actor } => {
                Some(Who::Delegated { subject, actor })
            }
            identity::Lookup::Absent | identity::Lookup::Refused(_) => None,
        }
    }

    fn principal(&self) -> Principal<'_> {
        fn party(named: &identity::Named) -> Party<'_> {
            Party {
                source: &named.source,
                name: &named.name,
            }
        }
        match self {
            Who::Named { source, name } => Principal::Named { source, name },
            Who::Delegated { subject, actor } => Principal::Delegated {
                subject: party(subject),
                actor: party(actor),
            },
            Who::AnonymousShared => Principal::AnonymousShared,
        }
    }
}

/// A claim this stream won.
#[derive(Debug, Clone)]
struct Owned {
    policy: Rc<Policy>,
    scope: Digest,
    /// The previous recipe's scope the claim also holds (`docs/stream-machine.md#recipe-transitions`).
    previous_scope: Option<Digest>,
    fingerprint: Digest,
    claim_id: Uuid,
    /// The claim's fence: logged with a hand-off, so an operator (or a
    /// history checker) can match it with what the upstream saw.
    fence: i64,
}

/// A claim ready to be made: what the edge-cache lookup needs, and the call.
#[derive(Debug, Clone)]
struct Ready {
    policy: Rc<Policy>,
    scope: Digest,
    previous_scope: Option<Digest>,
    fingerprint: Digest,
    accepted: Accepted,
    call: StoreCall,
    timeout: Duration,
}

#[derive(Debug, Clone, Default)]
enum State {
    /// Nothing seen yet.
    #[default]
    Start,
    /// Not guarded (or no longer guarded): every callback continues.
    Passthrough,
    /// Guarded; the body is being buffered for the fingerprint (F1).
    BufferingRequest(Pending),
    /// The body-digest memo's slot `key` is being read for this large JSON
    /// body, whose raw digest is `raw`.
    DigestLookup {
        pending: Pending,
        body: Vec<u8>,
        raw: RawDigest,
        key: String,
    },
    /// The edge cache is being read before the claim (F9).
    CacheLookup(Ready),
    /// The claim call is in flight; the request is held (F2).
    Claiming(Ready),
    /// The claim met an `unknown` record of run `fence`: the service is asked what
    /// became of it (`uncertain: reconcile`); the request is held.
    AskingService { ready: Ready, fence: i64 },
    /// The service answered; its answer is being reported to the lease-store.
    Reconciling {
        ready: Ready,
        fence: i64,
        settled: Settled,
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
    /// The settle call answered; the rest of the response flows.
    Delivering,
    /// A local reply (error or replay) was sent: response callbacks are ours.
    Replied,
    /// The stream is over.
    Done,
}

/// The state machine of one HTTP stream.
#[derive(Debug, Clone)]
pub struct Machine {
    config: Rc<Config>,
    state: State,
    /// The claim whose lease the outbox renews for this stream, until the
    /// stream settles it or hands it off.
    renewing: Option<Uuid>,
    /// The operator epoch the edge-cache read was made under (F9): entries
    /// this stream writes carry it, so an erase after it invalidates them.
    cache_epoch: Option<u64>,
    /// When that read was made (host clock, ms): before the claim, so before
    /// the store read or created the record whose entry this stream may write.
    cache_read_ms: u64,
    /// The service was asked about this request's record once already: a second
    /// `unknown` is answered, never asked about again in a loop.
    asked_service: bool,
}

impl Machine {
    /// A machine for a new stream.
    pub fn new(config: Rc<Config>) -> Self {
        Machine {
            config,
            state: State::Start,
            renewing: None,
            cache_epoch: None,
            cache_read_ms: 0,
            asked_service: false,
        }
    }

    /// Feeds one event; returns what to do, in order.
    pub fn on(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::RequestHeaders {
                headers,
                principal,
                previous_principal,
                end_of_stream,
            } => {
                self.request_headers(
                    &mut out,
                    &headers,
                    (principal, previous_principal),
                    end_of_stream,
                );
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
            Event::RequestBodyComplete { body } => self.request_body_complete(&mut out, body),
            Event::BodyDigestRead { slot } => self.body_digest_read(&mut out, slot.as_deref()),
            Event::EdgeCacheRead {
                slot,
                now_ms,
                epoch,
            } => {
                self.cache_epoch = epoch;
                self.cache_read_ms = now_ms;
                self.edge_cache_read(&mut out, slot.as_deref(), now_ms);
                out.push(self.request_verdict());
            }
            Event::StoreAnswered { answer, elapsed_ms } => {
                self.store_answered(&mut out, &answer, elapsed_ms);
            }
            Event::ServiceAnswered { answer } => self.service_answered(&mut out, &answer),
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

    /// The return value of a request callback.
    fn request_verdict(&self) -> Action {
        match self.state {
            State::BufferingRequest(_)
            | State::DigestLookup { .. }
            | State::CacheLookup(_)
            | State::Claiming(_)
            | State::AskingService { .. }
            | State::Reconciling { .. }
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

#[cfg(test)]
mod tests;
