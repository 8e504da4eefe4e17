//! [`Host`] implemented with the dynamic-module callbacks of `abi.rs`, and nothing else.
//!
//! A host error becomes an empty value or a logged no-op, as in `keyflight-filter-wasm`.
//! What differs from proxy-wasm (`filter-native/README.md#what-differs-from-the-wasm-host`):
//! a callout's answer arrives as the hook's arguments, not through getters; replies and
//! resumes wait until the driver returned ([`Deferred`]); shared data is this process's
//! memory; a worker's root driver ticks on the main thread, where its calls are the
//! configuration's callouts and its counts the configuration's, and coalesces its streams'
//! calls on the worker, where they go out as a live stream's callouts ([`RootCalls`],
//! `worker.rs`, `turn.rs`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use keyflight_filter::coalesce::StreamId;
use keyflight_filter::config::LeaseStore;
use keyflight_filter::drive::host::{Buffer, HeaderMap, Host, LogLevel};
use keyflight_filter::metrics::{Gauge, Metric};
use keyflight_filter::problem::LocalReply;
use keyflight_filter::reconcile::ServiceQuestion;
use keyflight_filter::store_call::Callout;
use keyflight_protocol::time::millis;

use crate::abi::{
    self, Attribute, BodyType, EnvoyBuffer, EnvoyFilter, HeaderType, HttpHeader, Level,
};
use crate::plugin::Plugin;
use crate::turn::Request;
use crate::worker::Slot;

/// Writes one log line prefixed with `keyflight:`.
pub fn log(level: Level, message: &str) {
    abi::log(level, &format!("keyflight: {message}"));
}

/// The answer of a callout, copied out of the hook Envoy delivered it in: it may have to
/// wait for the hook that sent the call to return (`hooks.rs`).
#[derive(Debug, Clone, Default)]
pub struct CallAnswer {
    /// Its headers (none when the call failed).
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// Its body.
    pub body: Vec<u8>,
}

impl CallAnswer {
    /// Copies Envoy's `headers` and `body` chunks.
    pub fn copy(headers: &[HttpHeader], body: &[EnvoyBuffer]) -> Self {
        CallAnswer {
            headers: headers
                .iter()
                .map(|header| {
                    let (name, value) = header.parts();
                    (name.to_vec(), value.to_vec())
                })
                .collect(),
            body: body
                .iter()
                .flat_map(|chunk| chunk.bytes())
                .copied()
                .collect(),
        }
    }
}

/// What a driver asked of Envoy that can run this stream's hooks again before the call
/// returns (a local reply runs the response hooks; a resume can end in the router's local
/// reply): performed once the driver has returned, as proxy-wasm defers them
/// (`docs/envoy-facts.md#dynamic-modules`).
#[derive(Debug, Clone)]
pub enum Deferred {
    /// `send_response`.
    Reply(LocalReply),
    /// `continue_decoding`.
    ResumeRequest,
    /// `continue_encoding`.
    ResumeResponse,
}

impl Deferred {
    /// Performs it on `filter`'s stream.
    pub fn perform(&self, filter: EnvoyFilter) {
        match self {
            Deferred::Reply(reply) => {
                let headers: Vec<(&str, &str)> = reply
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                filter.send_response(reply.status, &headers, &reply.body, "keyflight");
            }
            Deferred::ResumeRequest => filter.continue_decoding(),
            Deferred::ResumeResponse => filter.continue_encoding(),
        }
    }
}

/// The one wake-up queue a worker's root driver registers: the slot knows its streams
/// (`turn.rs`), so any number does.
const WAKE_QUEUE: u32 = 1;

/// How a root driver's callouts go out, and whose counters it moves.
#[derive(Debug, Clone, Copy)]
pub enum RootCalls {
    /// As the configuration's, on the main thread (the tick and its answers).
    Config,
    /// As callouts of this live stream of the worker, on the worker (a turn of coalesced
    /// calls, `turn.rs`).
    Carrier(StreamId, EnvoyFilter),
    /// Not at all: on the worker with no stream alive to carry them.
    Refused,
}

/// The host of one hook: the stream's filter and worker slot (none while configuring, or
/// for a root driver), the worker whose root driver runs and how its calls go out, and the
/// answer being delivered.
pub struct NativeHost<'a> {
    plugin: &'a Plugin,
    filter: Option<EnvoyFilter>,
    stream: Option<(&'a Arc<Slot>, StreamId)>,
    root: Option<&'a Arc<Slot>>,
    calls: RootCalls,
    /// The streams waiting for the root driver's callout being sent (`Host::dispatch_for`).
    waiting: Vec<StreamId>,
    answer: Option<&'a CallAnswer>,
    deferred: Vec<Deferred>,
}

impl<'a> NativeHost<'a> {
    /// The host while a worker reads its configuration (no stream).
    pub fn configuring(plugin: &'a Plugin) -> Self {
        NativeHost {
            plugin,
            filter: None,
            stream: None,
            root: None,
            calls: RootCalls::Refused,
            waiting: Vec::new(),
            answer: None,
            deferred: Vec::new(),
        }
    }

    /// The host of `slot`'s root driver, its calls going out as `calls` says.
    pub fn root(plugin: &'a Plugin, slot: &'a Arc<Slot>, calls: RootCalls) -> Self {
        NativeHost {
            root: Some(slot),
            calls,
            ..NativeHost::configuring(plugin)
        }
    }

    /// The host of a hook of `filter`'s stream `id`, made from `slot`'s root driver.
    pub fn stream(
        plugin: &'a Plugin,
        filter: EnvoyFilter,
        slot: &'a Arc<Slot>,
        id: StreamId,
    ) -> Self {
        NativeHost {
            filter: Some(filter),
            stream: Some((slot, id)),
            ..NativeHost::configuring(plugin)
        }
    }

    /// What the driver asked for that waits until it returned.
    pub fn into_deferred(self) -> Vec<Deferred> {
        self.deferred
    }

    /// The same host, delivering `answer`.
    pub fn answering(self, answer: &'a CallAnswer) -> Self {
        NativeHost {
            answer: Some(answer),
            ..self
        }
    }

    /// Bytes `0..size` of a request or response body: what the filter buffered, then the
    /// chunk of this hook (`docs/envoy-facts.md#dynamic-modules`).
    fn body(filter: EnvoyFilter, request: bool, size: usize) -> Vec<u8> {
        let (buffered, received) = if request {
            (BodyType::BufferedRequest, BodyType::ReceivedRequest)
        } else {
            (BodyType::BufferedResponse, BodyType::ReceivedResponse)
        };
        let mut body = Vec::new();
        filter.read_body(buffered, &mut body);
        if !filter.received_is_buffered(request) {
            filter.read_body(received, &mut body);
        }
        body.truncate(size);
        body
    }
}

/// Bytes buffered so far for a body hook, this hook's chunk included.
pub fn buffered_bytes(filter: EnvoyFilter, request: bool) -> usize {
    let (buffered, received) = if request {
        (BodyType::BufferedRequest, BodyType::ReceivedRequest)
    } else {
        (BodyType::BufferedResponse, BodyType::ReceivedResponse)
    };
    let mut bytes = filter.body_size(buffered);
    if !filter.received_is_buffered(request) {
        bytes += filter.body_size(received);
    }
    bytes
}

/// Shared data: one process, so one map for every worker (proxy-wasm's shared data is
/// per VM id, which every worker's VM shares).
static SHARED: LazyLock<Mutex<HashMap<String, Vec<u8>>>> = LazyLock::new(Mutex::default);

fn level(level: LogLevel) -> Level {
    match level {
        LogLevel::Info => Level::Info,
        LogLevel::Warn => Level::Warn,
        LogLevel::Error => Level::Error,
    }
}

fn header_type(map: HeaderMap) -> Option<HeaderType> {
    match map {
        HeaderMap::Request => Some(HeaderType::Request),
        HeaderMap::Response => Some(HeaderType::Response),
        HeaderMap::CallResponse => None,
    }
}

/// The attribute behind a proxy-wasm property path the filter reads; `None` for one the ABI
/// does not offer (JWT claims in `metadata` among them).
fn attribute(path: &[&str]) -> Option<(Attribute, bool)> {
    Some(match path {
        ["response", "code_details"] => (Attribute::ResponseCodeDetails, false),
        ["response", "flags"] => (Attribute::ResponseFlags, true),
        ["upstream", "request_attempt_count"] => (Attribute::UpstreamRequestAttemptCount, true),
        ["source", "address"] => (Attribute::SourceAddress, false),
        ["connection", "subject_peer_certificate"] => {
            (Attribute::ConnectionSubjectPeerCertificate, false)
        }
        ["connection", "dns_san_peer_certificate"] => {
            (Attribute::ConnectionDnsSanPeerCertificate, false)
        }
        ["connection", "uri_san_peer_certificate"] => {
            (Attribute::ConnectionUriSanPeerCertificate, false)
        }
        _ => return None,
    })
}

/// The wall clock in milliseconds, the drivers' clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis_of(duration: Duration) -> u64 {
    u64::try_from(duration.max(Duration::from_millis(1)).as_millis()).unwrap_or(u64::MAX)
}

impl NativeHost<'_> {
    /// Where counters move: a stream's (`Some(Some)`, its own or its carrier's), the
    /// configuration's on the main thread (`Some(None)`), or nowhere.
    fn counted_on(&self) -> Option<Option<EnvoyFilter>> {
        match (self.filter, self.root, self.calls) {
            (Some(filter), _, _) | (None, Some(_), RootCalls::Carrier(_, filter)) => {
                Some(Some(filter))
            }
            (None, Some(_), RootCalls::Config) => Some(None),
            _ => None,
        }
    }

    fn callout(
        &self,
        cluster: &str,
        headers: &[(&'static str, String)],
        body: &[u8],
        timeout: Duration,
        what: &str,
    ) -> Option<u32> {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let timeout = millis_of(timeout);
        let sent = match (self.filter, self.root, self.calls) {
            (Some(filter), _, _) => filter.http_callout(cluster, &headers, body, timeout),
            (None, Some(slot), RootCalls::Config) => self
                .plugin
                .root_callout(slot, cluster, &headers, body, timeout),
            (None, Some(slot), RootCalls::Carrier(stream, filter)) => filter
                .http_callout(cluster, &headers, body, timeout)
                .map(|id| {
                    let request = Request {
                        cluster: cluster.to_owned(),
                        headers: headers
                            .iter()
                            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                            .collect(),
                        body: body.to_vec(),
                        timeout_ms: timeout,
                        sent_at_ms: now_ms(),
                        waiting: self.waiting.clone(),
                    };
                    u64::from(slot.carry(stream, id, request))
                }),
            (None, Some(_), RootCalls::Refused) => {
                log(
                    Level::Warn,
                    &format!("{what} to cluster {cluster} not sent: no stream left to carry it"),
                );
                return None;
            }
            (None, None, _) => {
                log(
                    Level::Warn,
                    &format!("{what} to cluster {cluster} not sent while configuring"),
                );
                return None;
            }
        };
        match sent {
            Ok(id) => u32::try_from(id).ok(),
            Err(result) => {
                log(
                    Level::Warn,
                    &format!("could not dispatch {what} to cluster {cluster}: result {result}"),
                );
                None
            }
        }
    }
}

impl Host for NativeHost<'_> {
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn log(&mut self, level_of: LogLevel, message: &str) {
        log(level(level_of), message);
    }

    fn count(&mut self, metric: Metric) {
        match (self.counted_on(), self.plugin.counters.get(&metric)) {
            (Some(Some(filter)), Some(&id)) => filter.increment_counter(id, 1),
            (Some(None), Some(&id)) => self.plugin.config.increment_counter(id, 1),
            _ => {}
        }
    }

    fn adjust(&mut self, gauge: Gauge, delta: i64) {
        match (self.counted_on(), self.plugin.gauges.get(&gauge)) {
            (Some(Some(filter)), Some(&id)) => filter.adjust_gauge(id, delta),
            (Some(None), Some(&id)) => self.plugin.config.adjust_gauge(id, delta),
            _ => {}
        }
    }

    fn headers(&mut self, map: HeaderMap) -> Vec<(String, Vec<u8>)> {
        match (self.filter, header_type(map), self.answer) {
            (Some(filter), Some(map), _) => filter.headers(map),
            (_, None, Some(answer)) => answer
                .headers
                .iter()
                .map(|(name, value)| (String::from_utf8_lossy(name).into_owned(), value.clone()))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn header(&mut self, map: HeaderMap, name: &str) -> Option<Vec<u8>> {
        match (self.filter, header_type(map), self.answer) {
            (Some(filter), Some(map), _) => filter.header(map, name),
            (_, None, Some(answer)) => answer.headers.iter().find_map(|(key, value)| {
                key.eq_ignore_ascii_case(name.as_bytes())
                    .then(|| value.clone())
            }),
            _ => None,
        }
    }

    fn buffer(&mut self, buffer: Buffer, size: usize) -> Vec<u8> {
        match (buffer, self.filter) {
            (Buffer::PluginConfiguration, _) => self
                .plugin
                .json_bytes()
                .iter()
                .take(size)
                .copied()
                .collect(),
            (Buffer::RequestBody, Some(filter)) => NativeHost::body(filter, true, size),
            (Buffer::ResponseBody, Some(filter)) => NativeHost::body(filter, false, size),
            (Buffer::CallResponseBody, _) => self
                .answer
                .map(|answer| answer.body.iter().take(size).copied().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The module runs in Envoy's process: its environment is Envoy's.
    fn environment(&mut self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    /// Integer attributes come back as proxy-wasm's 8 little-endian bytes.
    fn property(&mut self, path: &[&str]) -> Option<Vec<u8>> {
        let filter = self.filter?;
        let (attribute, integer) = attribute(path)?;
        if integer {
            filter
                .attribute_int(attribute)
                .map(|n| n.to_le_bytes().to_vec())
        } else {
            filter.attribute_string(attribute)
        }
    }

    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        let set = self
            .filter
            .is_some_and(|f| f.set_request_header(name, value.map(str::as_bytes)));
        if !set {
            log(Level::Warn, &format!("could not set request header {name}"));
        }
    }

    fn resume_request(&mut self) {
        self.deferred.push(Deferred::ResumeRequest);
    }

    fn resume_response(&mut self) {
        self.deferred.push(Deferred::ResumeResponse);
    }

    fn send_reply(&mut self, reply: &LocalReply) {
        self.deferred.push(Deferred::Reply(reply.clone()));
    }

    fn shared_data(&mut self, key: &str) -> Option<Vec<u8>> {
        SHARED.lock().ok()?.get(key).cloned()
    }

    fn replace_shared_data(&mut self, key: &str, value: &[u8]) {
        if let Ok(mut shared) = SHARED.lock() {
            shared.insert(key.to_owned(), value.to_vec());
        }
    }

    fn dispatch(&mut self, store: &LeaseStore, callout: &Callout) -> Option<u32> {
        let headers = callout.headers(store);
        let body = callout.body().unwrap_or_default();
        let what = callout.path();
        self.callout(&store.cluster, &headers, &body, callout.timeout(), &what)
    }

    /// On the worker, the callout goes out as the first of `streams` still alive: it waits
    /// for the answer, so it lives as long as the call, where the stream running the turn
    /// may end first and take the call with it (`turn.rs`).
    fn dispatch_for(
        &mut self,
        store: &LeaseStore,
        callout: &Callout,
        streams: &[StreamId],
    ) -> Option<u32> {
        let waiting = match (self.root, self.calls) {
            (Some(slot), RootCalls::Carrier(..)) => slot.first_alive(streams),
            _ => None,
        };
        let Some((stream, filter)) = waiting else {
            return self.dispatch(store, callout);
        };
        let calls = std::mem::replace(&mut self.calls, RootCalls::Carrier(stream, filter));
        self.waiting = streams.to_vec();
        let token = self.dispatch(store, callout);
        self.waiting.clear();
        self.calls = calls;
        token
    }

    fn ask_service(&mut self, question: &ServiceQuestion, token: Option<&str>) -> Option<u32> {
        let headers = question.headers(token);
        self.callout(
            &question.reconcile.cluster,
            &headers,
            &[],
            question.reconcile.timeout,
            "the reconcile question",
        )
    }

    /// The worker's turn is a live stream's scheduled event (`turn.rs`,
    /// `docs/stream-machine.md#coalesced-calls`).
    fn register_wake_queue(&mut self) -> Option<u32> {
        Some(WAKE_QUEUE)
    }

    /// Commits the scheduler of this stream, or of the stream carrying the root driver's
    /// calls, or of any live stream of the worker.
    fn wake(&mut self, _queue: u32) -> bool {
        match (self.stream, self.root, self.calls) {
            (Some((slot, id)), _, _) | (None, Some(slot), RootCalls::Carrier(id, _)) => {
                slot.wake(Some(id))
            }
            (None, Some(slot), _) => slot.wake(None),
            (None, None, _) => false,
        }
    }

    /// The tick's period is set once per configuration, for every worker, by the ticker
    /// `config_hooks.rs` starts (`ticker.rs`).
    fn set_tick_period(&mut self, _period: Duration) {}

    /// A retired root driver settled its outbox: nothing ticks it any more.
    fn done(&mut self) {
        if let Some(slot) = self.root {
            slot.settle();
        }
    }
}
