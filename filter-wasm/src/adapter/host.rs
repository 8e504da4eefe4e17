//! Small wrappers over the proxy-wasm host calls the adapter uses.
//!
//! The SDK's `Context` methods `unwrap()` every host status, and a panic kills
//! the VM for every request on the worker. These wrappers call `hostcalls`
//! directly and turn every failure into an empty value or a logged no-op.
//! (The SDK's `hostcalls` still panic on a status they do not expect at all;
//! nothing here can prevent that, but no keyflight code adds a panic of its own.)

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use keyflight_protocol::time::millis;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, LogLevel, MapType, MetricType};

use filter::config::LeaseStore;
use filter::metrics::{Gauge, Metric};
use filter::problem::LocalReply;
use filter::store_call::{EPOCH_PATH, StoreCall};

/// Writes one log line prefixed with `keyflight:`.
pub fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, &format!("keyflight: {message}"));
}

/// Every header of a map, repeated names kept, names lowercase as Envoy gives them.
pub fn headers(map: MapType) -> Vec<(String, Vec<u8>)> {
    hostcalls::get_map_bytes(map).unwrap_or_default()
}

/// One header value (the first, if repeated).
pub fn header(map: MapType, name: &str) -> Option<Vec<u8>> {
    hostcalls::get_map_value_bytes(map, name).ok().flatten()
}

/// Sets or removes a request header.
pub fn set_request_header(name: &str, value: Option<&str>) {
    if hostcalls::set_map_value_bytes(MapType::HttpRequestHeaders, name, value.map(str::as_bytes))
        .is_err()
    {
        log(
            LogLevel::Warn,
            &format!("could not set request header {name}"),
        );
    }
}

/// Bytes `0..size` of a buffer (empty if unavailable).
pub fn buffer(kind: BufferType, size: usize) -> Vec<u8> {
    hostcalls::get_buffer(kind, 0, size)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// An Envoy property, `None` when absent or unreadable.
pub fn property(path: &[&str]) -> Option<Vec<u8>> {
    hostcalls::get_property(path.to_vec()).ok().flatten()
}

/// Milliseconds since the Unix epoch by the host's clock.
pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, millis)
}

/// A shared-data value and its CAS token (`None`s when absent or unreadable).
pub fn shared_data(key: &str) -> (Option<Vec<u8>>, Option<u32>) {
    hostcalls::get_shared_data(key).unwrap_or((None, None))
}

/// Overwrites a shared-data value, compare-and-swap against the version just
/// read: if another worker wrote the key in between, its value stays (both
/// were valid entries for that slot) and this write is dropped.
pub fn replace_shared_data(key: &str, value: &[u8]) {
    let (_, cas) = shared_data(key);
    if let Err(status) = hostcalls::set_shared_data(key, Some(value), cas)
        && !matches!(status, proxy_wasm::types::Status::CasMismatch)
    {
        log(
            LogLevel::Warn,
            &format!("could not write edge cache slot {key}: {status:?}"),
        );
    }
}

/// Tells the host a retired root context has finished its work.
pub fn done() {
    let _ = hostcalls::done();
}

/// Sets the root context's tick period.
pub fn set_tick_period(period: Duration) {
    let _ = hostcalls::set_tick_period(period);
}

/// Sends a local reply.
///
/// FIELD-NOTES: Envoy runs this stream's own response callbacks for the local
/// reply (after the current callback returns); the state machine is already in
/// its `Replied` state by then and passes them through untouched.
pub fn send_reply(reply: &LocalReply) {
    let headers: Vec<(&str, &str)> = reply
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    if hostcalls::send_http_response(u32::from(reply.status), headers, Some(&reply.body)).is_err() {
        log(LogLevel::Error, "could not send a local reply");
    }
}

/// Dispatches a lease-store call; returns the callout token.
///
/// FIELD-NOTES: the callout needs `:method`, `:path` and `:authority`, a
/// cluster that exists in the Envoy config, and a non-zero timeout (0 would
/// mean none at all).
pub fn dispatch(store: &LeaseStore, call: &StoreCall, timeout: Duration) -> Option<u32> {
    dispatch_request(store, "POST", &call.path(), Some(&call.body()), timeout)
}

/// Asks the lease-store for its operator epoch (`GET /v1/epoch`, F9).
pub fn dispatch_epoch(store: &LeaseStore, timeout: Duration) -> Option<u32> {
    dispatch_request(store, "GET", EPOCH_PATH, None, timeout)
}

fn dispatch_request(
    store: &LeaseStore,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Option<u32> {
    let bearer = format!("Bearer {}", store.token);
    let headers = vec![
        (":method", method),
        (":path", path),
        (":authority", store.authority.as_str()),
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let timeout = timeout.max(Duration::from_millis(1));
    match hostcalls::dispatch_http_call(&store.cluster, headers, body, vec![], timeout) {
        Ok(token) => Some(token),
        Err(status) => {
            log(
                LogLevel::Warn,
                &format!(
                    "could not dispatch {path} to cluster {}: {status:?}",
                    store.cluster
                ),
            );
            None
        }
    }
}

/// The status and body of a callout answer.
///
/// FIELD-NOTES: a failed call arrives with zero headers; reading `:status`
/// through the SDK's string getter would panic, so a headerless answer is
/// reported as `None` without touching the map.
pub fn call_answer(num_headers: usize, body_size: usize) -> (Option<u16>, Vec<u8>) {
    if num_headers == 0 {
        return (None, Vec::new());
    }
    let status = header(MapType::HttpCallResponseHeaders, ":status")
        .and_then(|v| filter::store_call::parse_status(&v));
    (status, buffer(BufferType::HttpCallResponseBody, body_size))
}

/// Envoy counter and gauge ids, defined once at configuration time.
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

    /// Adds `delta` to a gauge. Every worker adds its own changes, so the
    /// gauge Envoy reports is the sum over workers.
    pub fn adjust(&self, gauge: Gauge, delta: i64) {
        if let Some(&id) = self.gauges.get(&gauge) {
            let _ = hostcalls::increment_metric(id, delta);
        }
    }

    /// Increments one counter.
    pub fn increment(&self, metric: Metric) {
        if let Some(&id) = self.ids.get(&metric) {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}
