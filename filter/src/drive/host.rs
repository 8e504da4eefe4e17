//! The host calls the filter's decisions need, as a trait
//! (`docs/stream-machine.md#the-driver`).
//!
//! The two drivers — [`super::stream::Stream`] for an HTTP stream and
//! [`super::worker::Root`] for a worker's root context — run the pure
//! decisions and perform what they ask through [`Host`]. `keyflight-filter-wasm`
//! implements it with proxy-wasm host calls and nothing else; the native tests
//! implement it with a fake host that answers from data and records what it
//! was asked. Each method is one host call (a compare-and-swap write is the
//! read and the write it takes), and none can fail loudly: a host error
//! becomes an empty value or a logged no-op in the implementation, never a
//! panic, because a panic kills the worker's Wasm VM.

use std::time::Duration;

use keyflight_protocol::wire::framed;

use crate::coalesce::StreamId;
use crate::config::LeaseStore;
pub use crate::log::LogLevel;
use crate::metrics::{Gauge, Metric};
use crate::problem::LocalReply;
use crate::reconcile::ServiceQuestion;
use crate::store_call::{Answer, Callout, parse_status};

/// A header map of the current context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderMap {
    /// The HTTP stream's request headers.
    Request,
    /// The HTTP stream's response headers.
    Response,
    /// The headers of the callout answer being delivered.
    CallResponse,
}

/// A buffer of the current context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffer {
    /// The HTTP stream's buffered request body.
    RequestBody,
    /// The HTTP stream's buffered response body.
    ResponseBody,
    /// The body of the callout answer being delivered.
    CallResponseBody,
    /// The plugin configuration (in `on_configure`).
    PluginConfiguration,
}

/// What the filter asks of its host. Every method acts on the context the
/// host is calling into (the stream, or the root context).
pub trait Host {
    /// Milliseconds since the Unix epoch by the host's clock.
    fn now_ms(&self) -> u64;
    /// Writes one log line (never a raw key, principal or body).
    fn log(&mut self, level: LogLevel, message: &str);
    /// Increments a counter.
    fn count(&mut self, metric: Metric);
    /// Adds `delta` to a gauge (every worker adds its own changes).
    fn adjust(&mut self, gauge: Gauge, delta: i64);
    /// Every header of a map, in order, repeated names kept, names lowercase.
    fn headers(&mut self, map: HeaderMap) -> Vec<(String, Vec<u8>)>;
    /// One header's value (the first, if repeated).
    fn header(&mut self, map: HeaderMap, name: &str) -> Option<Vec<u8>>;
    /// Bytes `0..size` of a buffer (empty if unavailable).
    fn buffer(&mut self, buffer: Buffer, size: usize) -> Vec<u8>;
    /// A variable of the VM's environment (Envoy's `vm_config.environment_variables`),
    /// `None` when unset or not UTF-8.
    fn environment(&mut self, name: &str) -> Option<String>;
    /// An Envoy property, `None` when absent or unreadable.
    fn property(&mut self, path: &[&str]) -> Option<Vec<u8>>;
    /// Sets (`Some`) or removes (`None`) a request header.
    fn set_request_header(&mut self, name: &str, value: Option<&str>);
    /// Resumes the paused request. Never called inside a host callback:
    /// there the callback's answer resumes (`docs/envoy-facts.md#callbacks-and-resumes`).
    fn resume_request(&mut self);
    /// Resumes the held response (same rule).
    fn resume_response(&mut self);
    /// Sends a local reply; its response callbacks come back through the stream.
    fn send_reply(&mut self, reply: &LocalReply);
    /// A shared-data value (the edge cache's and the body-digest memo's
    /// slots), `None` when absent.
    fn shared_data(&mut self, key: &str) -> Option<Vec<u8>>;
    /// Overwrites a shared-data value, compare-and-swap against the version
    /// just read: if another worker wrote it in between, its value stays.
    fn replace_shared_data(&mut self, key: &str, value: &[u8]);
    /// Dispatches a lease-store request; returns its token, `None` when the
    /// host refused it.
    fn dispatch(&mut self, store: &LeaseStore, callout: &Callout) -> Option<u32>;
    /// [`Host::dispatch`] of the root context's callout for `streams`' queued calls. A host
    /// whose callouts belong to a stream sends it as one of those, which wait for its
    /// answer (`filter-native/README.md#coalesced-calls`); the others need not know.
    fn dispatch_for(
        &mut self,
        store: &LeaseStore,
        callout: &Callout,
        streams: &[StreamId],
    ) -> Option<u32> {
        let _ = streams;
        self.dispatch(store, callout)
    }
    /// Dispatches the reconcile question to the service's cluster, with keyflight's
    /// `token` for it; returns its token, `None` when the host refused it.
    fn ask_service(&mut self, question: &ServiceQuestion, token: Option<&str>) -> Option<u32>;
    /// Registers the root context's wake-up queue, which only this worker reads; `None`
    /// when the host refused (`docs/envoy-facts.md#waking-the-root-context`).
    fn register_wake_queue(&mut self) -> Option<u32>;
    /// Wakes the root context that registered `queue`: the host calls it after the
    /// callbacks of the current event-loop turn. `false` when the host refused.
    fn wake(&mut self, queue: u32) -> bool;
    /// Sets the root context's tick period.
    fn set_tick_period(&mut self, period: Duration);
    /// Tells the host a retired root context has finished its work.
    fn done(&mut self);
}

/// The host's report that a callout answered (`on_http_call_response`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalloutAnswered {
    /// The token `dispatch` returned for the call.
    pub token: u32,
    /// Headers of the answer; zero when the call failed without one.
    pub num_headers: usize,
    /// Bytes of the answer's body.
    pub body_size: usize,
}

/// What both drivers — the root context's and a stream's — take from the
/// host besides their own callbacks: callout answers, and retirement.
pub trait Driver {
    /// A callout answered; only the driver's own calls are read.
    fn on_call_answer(&mut self, answered: CalloutAnswered, host: &mut impl Host);
    /// The host retires the context: whether it is finished now (a stream
    /// is; a root context may ask to stay until its outbox is settled).
    fn on_done(&mut self, host: &mut impl Host) -> bool;
}

/// Reads the callout answer the host is delivering. A failed call arrives
/// with zero headers; the map is then not touched at all
/// (`docs/envoy-facts.md#callouts`).
pub fn read_answer(host: &mut impl Host, answered: CalloutAnswered) -> Answer {
    if answered.num_headers == 0 {
        return Answer::Received {
            status: None,
            body: Vec::new(),
            framed: false,
        };
    }
    let status = host
        .header(HeaderMap::CallResponse, ":status")
        .and_then(|v| parse_status(&v));
    let framed = host
        .header(HeaderMap::CallResponse, "content-type")
        .is_some_and(|v| std::str::from_utf8(&v).is_ok_and(framed::is_framed));
    Answer::Received {
        status,
        body: host.buffer(Buffer::CallResponseBody, answered.body_size),
        framed,
    }
}
