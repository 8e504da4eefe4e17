//! What goes into the state machine ([`Event`]) and what comes out ([`Action`]).
//!
//! Events are what the host reported, already read into plain data; actions
//! are what the driver ([`crate::drive::stream`]) must do, in order. Actions named
//! `Continue…`/`Pause…` are the return value of the host callback that
//! produced the event; the machine appends one of them to the actions of
//! every callback event (for response headers that need reading, to the
//! actions of the read's follow-up). A read the driver answers at once
//! (`ReadRequestBody`, `ReadBodyDigest`, `ReadEdgeCache`, `ReadResponseHeaders`, and a call the
//! host refused to dispatch) comes back as a follow-up event whose actions run
//! first, so the first `Continue…`/`Pause…` the driver meets is the
//! callback's answer (`docs/stream-machine.md#callback-rules`).
//!
//! Reads are asked for, not pushed, because every host read crosses the
//! V8↔Envoy boundary (twice when the host allocates the answer in the VM):
//! the hot replay path (F9) reads only what its decision needs.

use std::time::Duration;

use uuid::Uuid;

use crate::edge_cache::Entry;
use crate::identity::Lookup;
use crate::log::{LogLevel, Repeating};
use crate::metrics::Metric;
use crate::outbox::{Handoff, Lease};
use crate::problem::LocalReply;
use crate::reconcile::ServiceQuestion;
use crate::status_matrix::ResponseOrigin;
use crate::store_call::{Answer, StoreCall};

/// Something the host reported about this HTTP stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `on_http_request_headers`: the full header list (lowercase names,
    /// pseudo-headers included, repeated names kept) and the principal the
    /// driver resolved from the configured sources (K2).
    RequestHeaders {
        /// Every request header, in order.
        headers: Vec<(String, Vec<u8>)>,
        /// What the configured principal sources say.
        principal: Lookup,
        /// What `identity.previous` says, while it is configured
        /// (`docs/stream-machine.md#recipe-transitions`).
        previous_principal: Option<Lookup>,
        /// The request has no body.
        end_of_stream: bool,
    },
    /// `on_http_request_body`: `buffered_bytes` is the body size buffered so far.
    RequestBodyChunk {
        /// Bytes buffered by the host so far.
        buffered_bytes: usize,
        /// This is the last chunk.
        end_of_stream: bool,
    },
    /// `on_http_request_trailers`: the body ended with trailers (HTTP/2).
    RequestTrailers,
    /// The whole request body, read in answer to [`Action::ReadRequestBody`].
    RequestBodyComplete {
        /// The body.
        body: Vec<u8>,
    },
    /// The body-digest memo's slot read for [`Action::ReadBodyDigest`],
    /// `None` when the slot was never written.
    BodyDigestRead {
        /// The slot's bytes.
        slot: Option<Vec<u8>>,
    },
    /// The edge-cache slot read for [`Action::ReadEdgeCache`] (F9), with the
    /// host's clock at the time of the read.
    EdgeCacheRead {
        /// The slot's bytes, `None` when the slot was never written.
        slot: Option<Vec<u8>>,
        /// Milliseconds since the Unix epoch.
        now_ms: u64,
        /// The lease-store's operator epoch as this worker last heard it,
        /// `None` when that answer is older than `edge_cache.max_staleness_ms`
        /// (then the cache is not used, F9).
        epoch: Option<u64>,
    },
    /// The store call in flight (the claim, or the finalize or release)
    /// answered, or could not be sent. The machine knows which call that was
    /// and reads the answer itself.
    StoreAnswered {
        /// What came back.
        answer: Answer,
        /// Milliseconds from dispatching the call to its answer, by the
        /// host's clock (a claim's lease runs from before its answer).
        elapsed_ms: u64,
    },
    /// The service answered the reconcile question ([`Action::AskService`]), or could
    /// not be asked.
    ServiceAnswered {
        /// What came back.
        answer: Answer,
    },
    /// `on_http_response_headers`. Nothing is read yet: only a response this
    /// stream records needs its status, headers and origin, and the machine
    /// asks for them with [`Action::ReadResponseHeaders`]. A replay's own
    /// local reply (the edge-cache hit path) thus costs no host reads here.
    ResponseHeaders {
        /// The response has no body.
        end_of_stream: bool,
    },
    /// The response head, read in answer to [`Action::ReadResponseHeaders`].
    ResponseHeadersRead {
        /// `:status` (the driver passes 502 when it is missing or unreadable).
        status: u16,
        /// Every response header, in order.
        headers: Vec<(String, Vec<u8>)>,
        /// Whether the upstream or the proxy produced this response.
        origin: ResponseOrigin,
        /// The response has no body.
        end_of_stream: bool,
    },
    /// `on_http_response_body`.
    ResponseBodyChunk {
        /// Bytes buffered by the host so far.
        buffered_bytes: usize,
        /// This is the last chunk.
        end_of_stream: bool,
    },
    /// `on_http_response_trailers`: the body ended with trailers.
    ResponseTrailers,
    /// The whole response body, read in answer to [`Action::ReadResponseBody`].
    ResponseBodyComplete {
        /// The body.
        body: Vec<u8>,
    },
    /// The stream ended (`on_done` / `on_log`), for whatever reason.
    StreamDone,
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Return `Continue` from the request callback.
    ContinueRequest,
    /// Return `Pause` from the request callback.
    PauseRequest,
    /// Read the buffered request body (`size` bytes) and report it as
    /// [`Event::RequestBodyComplete`].
    ReadRequestBody {
        /// Bytes to read.
        size: usize,
    },
    /// Set (`Some`) or remove (`None`) a request header before it goes upstream.
    SetRequestHeader {
        /// Lowercase name.
        name: String,
        /// New value, or `None` to remove.
        value: Option<String>,
    },
    /// Resume the paused request (`resume_http_request`).
    ResumeRequest,
    /// Read the body-digest memo's slot `key` from shared data and report it
    /// as [`Event::BodyDigestRead`] (`docs/stream-machine.md#the-body-digest-memo`).
    ReadBodyDigest {
        /// The shared-data key.
        key: String,
    },
    /// Write `value` into the body-digest memo's slot `key`, whatever it held.
    WriteBodyDigest {
        /// The shared-data key.
        key: String,
        /// The encoded entry.
        value: Vec<u8>,
    },
    /// Read the edge-cache slot `key` from shared data and report it as
    /// [`Event::EdgeCacheRead`] (F9).
    ReadEdgeCache {
        /// The shared-data key.
        key: String,
    },
    /// Write `entry` into the edge-cache slot `key` (compare-and-swap; a lost
    /// race simply leaves the other writer's entry).
    WriteEdgeCache {
        /// The shared-data key.
        key: String,
        /// The record to cache, encoded by the driver with the host's clock.
        entry: Entry,
    },
    /// Call the lease-store.
    CallStore {
        /// Which call.
        call: StoreCall,
        /// Its timeout.
        timeout: Duration,
    },
    /// Ask the service what became of a run whose outcome is uncertain
    /// (`uncertain: reconcile`); its answer comes back as [`Event::ServiceAnswered`].
    AskService(ServiceQuestion),
    /// Send a local reply (error or replay). Its response callbacks come back
    /// through this machine, which knows they are its own.
    Reply(LocalReply),
    /// Read the response's `:status`, header list and origin, and report
    /// them as [`Event::ResponseHeadersRead`] with `end_of_stream` echoed.
    ReadResponseHeaders {
        /// Echoed from [`Event::ResponseHeaders`].
        end_of_stream: bool,
    },
    /// Return `Continue` from the response callback.
    ContinueResponse,
    /// Return `Pause` from the response callback.
    PauseResponse,
    /// Read the buffered response body (`size` bytes) and report it as
    /// [`Event::ResponseBodyComplete`].
    ReadResponseBody {
        /// Bytes to read.
        size: usize,
    },
    /// Resume the held response (`resume_http_response`).
    ResumeResponse,
    /// Register the won claim with the worker's outbox, which renews its
    /// lease every `interval` (F4) until the stream settles or hands it off.
    StartRenewal(Lease),
    /// The stream settled its claim: the outbox stops renewing it.
    StopRenewal {
        /// The claim.
        claim_id: Uuid,
    },
    /// A finalize or release found this stream's lease stolen: the outbox
    /// counts `lease_stolen` unless a renew already did.
    LeaseLost {
        /// The claim.
        claim_id: Uuid,
    },
    /// The stream cannot see its claim settled: the outbox takes the claim
    /// and its settle call over (F14).
    HandOff(Handoff),
    /// Increment a counter.
    Count(Metric),
    /// Write a log line (never a raw key, principal or body).
    Log {
        /// Severity.
        level: LogLevel,
        /// The message.
        message: String,
    },
    /// Write a warning that repeats once per request while its cause lasts: the worker
    /// rate-limits it per kind ([`crate::log::LogLimit`]).
    WarnRepeating {
        /// Which warning, for its rate limit.
        kind: Repeating,
        /// The message.
        message: String,
    },
}
