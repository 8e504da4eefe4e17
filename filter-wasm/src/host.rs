//! [`Host`] implemented with proxy-wasm host calls, and nothing else.
//!
//! The SDK's `Context` methods `unwrap()` every host status, and a panic
//! kills the VM for every request on the worker. These call `hostcalls`
//! directly and turn every failure into an empty value or a logged no-op.
//! (The SDK's `hostcalls` still panic on a status they do not expect at all;
//! nothing here can prevent that, but no keyflight code adds a panic of its
//! own.) Which host behaviour the filter relies on is in
//! `docs/envoy-facts.md`.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, UNIX_EPOCH};

use keyflight_filter::config::LeaseStore;
use keyflight_filter::drive::host::{Buffer, HeaderMap, Host, LogLevel};
use keyflight_filter::metrics::{Gauge, Metric};
use keyflight_filter::problem::LocalReply;
use keyflight_filter::reconcile::ServiceQuestion;
use keyflight_filter::store_call::Callout;
use keyflight_protocol::time::millis;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{self, BufferType, MapType, MetricType};

/// Writes one log line prefixed with `keyflight:`.
pub fn log(level: types::LogLevel, message: &str) {
    let _ = hostcalls::log(level, &format!("keyflight: {message}"));
}

/// The host of the context being called into; counters by their Envoy ids.
pub struct HostCalls<'a> {
    counters: &'a Counters,
}

impl<'a> HostCalls<'a> {
    /// Host calls that increment `counters`.
    pub fn new(counters: &'a Counters) -> Self {
        HostCalls { counters }
    }
}

fn map_type(map: HeaderMap) -> MapType {
    match map {
        HeaderMap::Request => MapType::HttpRequestHeaders,
        HeaderMap::Response => MapType::HttpResponseHeaders,
        HeaderMap::CallResponse => MapType::HttpCallResponseHeaders,
    }
}

fn buffer_type(buffer: Buffer) -> BufferType {
    match buffer {
        Buffer::RequestBody => BufferType::HttpRequestBody,
        Buffer::ResponseBody => BufferType::HttpResponseBody,
        Buffer::CallResponseBody => BufferType::HttpCallResponseBody,
        Buffer::PluginConfiguration => BufferType::PluginConfiguration,
    }
}

fn log_level(level: LogLevel) -> types::LogLevel {
    match level {
        LogLevel::Info => types::LogLevel::Info,
        LogLevel::Warn => types::LogLevel::Warn,
        LogLevel::Error => types::LogLevel::Error,
    }
}

impl Host for HostCalls<'_> {
    fn now_ms(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, millis)
    }

    fn log(&mut self, level: LogLevel, message: &str) {
        log(log_level(level), message);
    }

    /// WASI's `environ_get`: Envoy hands the VM the variables its `vm_config` lists
    /// (`docs/envoy-facts.md#the-vm-environment`).
    fn environment(&mut self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn count(&mut self, metric: Metric) {
        if let Some(&id) = self.counters.ids.get(&metric) {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }

    fn adjust(&mut self, gauge: Gauge, delta: i64) {
        if let Some(&id) = self.counters.gauges.get(&gauge) {
            let _ = hostcalls::increment_metric(id, delta);
        }
    }

    fn headers(&mut self, map: HeaderMap) -> Vec<(String, Vec<u8>)> {
        hostcalls::get_map_bytes(map_type(map)).unwrap_or_default()
    }

    fn header(&mut self, map: HeaderMap, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(map_type(map), name)
            .ok()
            .flatten()
    }

    fn buffer(&mut self, buffer: Buffer, size: usize) -> Vec<u8> {
        hostcalls::get_buffer(buffer_type(buffer), 0, size)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    fn property(&mut self, path: &[&str]) -> Option<Vec<u8>> {
        hostcalls::get_property(path.to_vec()).ok().flatten()
    }

    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        let set = hostcalls::set_map_value_bytes(
            MapType::HttpRequestHeaders,
            name,
            value.map(str::as_bytes),
        );
        if set.is_err() {
            log(
                types::LogLevel::Warn,
                &format!("could not set request header {name}"),
            );
        }
    }

    fn resume_request(&mut self) {
        let _ = hostcalls::resume_http_request();
    }

    fn resume_response(&mut self) {
        let _ = hostcalls::resume_http_response();
    }

    /// Envoy runs this stream's own response callbacks for the local reply,
    /// after the current callback returns (`docs/envoy-facts.md#callbacks-and-resumes`).
    fn send_reply(&mut self, reply: &LocalReply) {
        let headers: Vec<(&str, &str)> = reply
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let sent =
            hostcalls::send_http_response(u32::from(reply.status), headers, Some(&reply.body));
        if sent.is_err() {
            log(types::LogLevel::Error, "could not send a local reply");
        }
    }

    fn shared_data(&mut self, key: &str) -> Option<Vec<u8>> {
        hostcalls::get_shared_data(key)
            .ok()
            .and_then(|(value, _)| value)
    }

    /// Without compare-and-swap: reading the slot for its version would copy the entry
    /// it replaces, for a check that guards only the moment between the two calls.
    fn replace_shared_data(&mut self, key: &str, value: &[u8]) {
        if let Err(status) = hostcalls::set_shared_data(key, Some(value), None) {
            log(
                types::LogLevel::Warn,
                &format!("could not write shared data slot {key}: {status:?}"),
            );
        }
    }

    fn dispatch(&mut self, store: &LeaseStore, callout: &Callout) -> Option<u32> {
        let headers = callout.headers(store);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let body = callout.body();
        match hostcalls::dispatch_http_call(
            &store.cluster,
            headers,
            body.as_deref(),
            vec![],
            callout.timeout(),
        ) {
            Ok(token) => Some(token),
            Err(status) => {
                log(
                    types::LogLevel::Warn,
                    &format!(
                        "could not dispatch {} to cluster {}: {status:?}",
                        callout.path(),
                        store.cluster
                    ),
                );
                None
            }
        }
    }

    fn ask_service(&mut self, question: &ServiceQuestion, token: Option<&str>) -> Option<u32> {
        let headers = question.headers(token);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let cluster = &question.reconcile.cluster;
        match hostcalls::dispatch_http_call(
            cluster,
            headers,
            None,
            vec![],
            question.reconcile.timeout.max(Duration::from_millis(1)),
        ) {
            Ok(token) => Some(token),
            Err(status) => {
                log(
                    types::LogLevel::Warn,
                    &format!(
                        "could not dispatch the reconcile question to cluster {cluster}: {status:?}"
                    ),
                );
                None
            }
        }
    }

    /// A shared queue under a name no other worker's VM uses: Envoy keeps one queue per
    /// VM id and name, and the last to register it is the one woken
    /// (`docs/envoy-facts.md#waking-the-root-context`). `RandomState` draws its keys from
    /// WASI's `random_get`, once per VM.
    fn register_wake_queue(&mut self) -> Option<u32> {
        let nonce = RandomState::new().build_hasher().finish();
        match hostcalls::register_shared_queue(&format!("keyflight-wake-{nonce:016x}")) {
            Ok(queue) => Some(queue),
            Err(status) => {
                log(
                    types::LogLevel::Warn,
                    &format!(
                        "could not register the wake-up queue ({status:?}): streams send their own store calls"
                    ),
                );
                None
            }
        }
    }

    fn wake(&mut self, queue: u32) -> bool {
        match hostcalls::enqueue_shared_queue(queue, None) {
            Ok(()) => true,
            Err(status) => {
                log(
                    types::LogLevel::Warn,
                    &format!(
                        "could not wake the root context ({status:?}): the stream sends its call itself"
                    ),
                );
                false
            }
        }
    }

    fn set_tick_period(&mut self, period: Duration) {
        let _ = hostcalls::set_tick_period(period);
    }

    fn done(&mut self) {
        let _ = hostcalls::done();
    }
}

/// Envoy counter and gauge ids, defined once per configuration.
#[derive(Debug, Default)]
pub struct Counters {
    ids: HashMap<Metric, u32>,
    gauges: HashMap<Gauge, u32>,
}

impl Counters {
    /// Defines every keyflight counter and gauge.
    pub fn define() -> Self {
        let ids = Metric::all()
            .filter_map(|m| {
                hostcalls::define_metric(MetricType::Counter, &m.name())
                    .ok()
                    .map(|id| (m, id))
            })
            .collect();
        let gauges = Gauge::ALL
            .into_iter()
            .filter_map(|g| {
                hostcalls::define_metric(MetricType::Gauge, g.name())
                    .ok()
                    .map(|id| (g, id))
            })
            .collect();
        Counters { ids, gauges }
    }
}
