//! The subset of Envoy's HTTP dynamic-module ABI this adapter uses, declared by hand from
//! `source/extensions/dynamic_modules/abi/abi.h` (`filter-native/README.md#the-abi`), and
//! safe wrappers around each callback.
//!
//! Every symbol here was checked against the exports of the Envoy 1.40.0 binary
//! `scripts/envoy.sh` installs (`docs/envoy-facts.md#dynamic-modules`). The C enums are
//! `int`s; their values are the declaration order in the header.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

/// The ABI version this module was written against; Envoy compares it at load with its own.
pub const ABI_VERSION: &std::ffi::CStr = c"v0.2.0";

/// `envoy_dynamic_module_type_http_filter_envoy_ptr`: Envoy's per-stream filter.
pub type FilterEnvoyPtr = *mut c_void;
/// `envoy_dynamic_module_type_http_filter_config_envoy_ptr`: Envoy's filter configuration.
pub type ConfigEnvoyPtr = *mut c_void;

/// `envoy_dynamic_module_type_envoy_buffer`: bytes Envoy owns.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    ptr: *const u8,
    length: usize,
}

impl EnvoyBuffer {
    const EMPTY: EnvoyBuffer = EnvoyBuffer {
        ptr: ptr::null(),
        length: 0,
    };

    /// The bytes. A buffer only ever comes from Envoy, valid for the hook that handed it
    /// over, and no value of this type outlives that hook.
    pub fn bytes(&self) -> &[u8] {
        raw_bytes(self.ptr, self.length)
    }
}

/// Bytes Envoy handed over: only ever read during the hook that handed them.
fn raw_bytes<'a>(ptr: *const u8, length: usize) -> &'a [u8] {
    if ptr.is_null() {
        &[]
    } else {
        // SAFETY: Envoy hands a pointer and its length, valid until the hook returns.
        unsafe { std::slice::from_raw_parts(ptr, length) }
    }
}

/// `envoy_dynamic_module_type_module_buffer`: bytes the module owns for one call.
#[repr(C)]
#[derive(Clone, Copy)]
struct ModuleBuffer {
    ptr: *const u8,
    length: usize,
}

impl ModuleBuffer {
    fn of(bytes: &[u8]) -> Self {
        ModuleBuffer {
            ptr: bytes.as_ptr(),
            length: bytes.len(),
        }
    }

    const NULL: ModuleBuffer = ModuleBuffer {
        ptr: ptr::null(),
        length: 0,
    };
}

/// `envoy_dynamic_module_type_envoy_http_header` and `..._module_http_header` (same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HttpHeader {
    key_ptr: *const u8,
    key_length: usize,
    value_ptr: *const u8,
    value_length: usize,
}

impl HttpHeader {
    const EMPTY: HttpHeader = HttpHeader {
        key_ptr: ptr::null(),
        key_length: 0,
        value_ptr: ptr::null(),
        value_length: 0,
    };

    fn of(name: &str, value: &[u8]) -> Self {
        HttpHeader {
            key_ptr: name.as_ptr(),
            key_length: name.len(),
            value_ptr: value.as_ptr(),
            value_length: value.len(),
        }
    }

    /// The name and value (see [`EnvoyBuffer::bytes`]).
    pub fn parts(&self) -> (&[u8], &[u8]) {
        (
            raw_bytes(self.key_ptr, self.key_length),
            raw_bytes(self.value_ptr, self.value_length),
        )
    }
}

/// `envoy_dynamic_module_type_http_header_type`.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum HeaderType {
    /// The request headers.
    Request = 0,
    /// The response headers.
    Response = 2,
}

/// `envoy_dynamic_module_type_http_body_type`: the chunk of this hook (`Received…`) or what
/// the filter buffered before it (`Buffered…`).
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum BodyType {
    /// The request chunk of this hook.
    ReceivedRequest = 0,
    /// The request body buffered so far.
    BufferedRequest = 1,
    /// The response chunk of this hook.
    ReceivedResponse = 2,
    /// The response body buffered so far.
    BufferedResponse = 3,
}

/// `envoy_dynamic_module_type_log_level`.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum Level {
    /// `Info`.
    Info = 2,
    /// `Warn`.
    Warn = 3,
    /// `Error`.
    Error = 4,
    /// `Critical`.
    Critical = 5,
}

/// `envoy_dynamic_module_type_attribute_id` values the filter reads.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum Attribute {
    /// `response.code_details`.
    ResponseCodeDetails = 16,
    /// `response.flags`.
    ResponseFlags = 17,
    /// `source.address`.
    SourceAddress = 24,
    /// `connection.subject_peer_certificate`.
    ConnectionSubjectPeerCertificate = 33,
    /// `connection.dns_san_peer_certificate`.
    ConnectionDnsSanPeerCertificate = 35,
    /// `connection.uri_san_peer_certificate`.
    ConnectionUriSanPeerCertificate = 37,
    /// `upstream.request_attempt_count`.
    UpstreamRequestAttemptCount = 53,
}

/// `envoy_dynamic_module_type_http_callout_init_result_Success`.
const CALLOUT_INIT_SUCCESS: i32 = 0;
/// `envoy_dynamic_module_type_metrics_result_Success`.
const METRICS_SUCCESS: i32 = 0;

unsafe extern "C" {
    fn envoy_dynamic_module_callback_log(level: i32, message: ModuleBuffer);
    fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *const ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: FilterEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_increment_gauge(
        filter: FilterEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_decrement_gauge(
        filter: FilterEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_get_header(
        filter: FilterEnvoyPtr,
        header_type: i32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: FilterEnvoyPtr,
        header_type: i32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_get_headers(
        filter: FilterEnvoyPtr,
        header_type: i32,
        result: *mut HttpHeader,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoyPtr,
        header_type: i32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_send_response(
        filter: FilterEnvoyPtr,
        status: u32,
        headers: *const HttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    fn envoy_dynamic_module_callback_http_get_body_size(
        filter: FilterEnvoyPtr,
        body_type: i32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: FilterEnvoyPtr,
        body_type: i32,
    ) -> usize;
    fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: FilterEnvoyPtr,
        body_type: i32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_received_buffered_request_body(
        filter: FilterEnvoyPtr,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_received_buffered_response_body(
        filter: FilterEnvoyPtr,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_get_attribute_string(
        filter: FilterEnvoyPtr,
        attribute: i32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_get_attribute_int(
        filter: FilterEnvoyPtr,
        attribute: i32,
        result: *mut u64,
    ) -> bool;
    fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: FilterEnvoyPtr,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *const HttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_config_increment_gauge(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_config_decrement_gauge(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *const ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: ConfigEnvoyPtr,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *const HttpHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> i32;
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: ConfigEnvoyPtr,
    ) -> *mut c_void;
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: *mut c_void);
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_scheduler_new(
        filter: FilterEnvoyPtr,
    ) -> *mut c_void;
    fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);
    fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: FilterEnvoyPtr);
    fn envoy_dynamic_module_callback_http_filter_continue_encoding(filter: FilterEnvoyPtr);
}

/// Writes one line to Envoy's log (its `dynamic_modules` logger).
pub fn log(level: Level, message: &str) {
    // SAFETY: the buffer outlives the call, which copies it.
    unsafe { envoy_dynamic_module_callback_log(level as i32, ModuleBuffer::of(message.as_bytes())) }
}

/// Envoy's filter configuration, valid from `on_http_filter_config_new` to
/// `on_http_filter_config_destroy`. Metrics are defined only during the first (Envoy freezes
/// stat creation after it); the other calls are made on the main thread, in the
/// configuration's own hooks (`docs/envoy-facts.md#dynamic-modules`).
#[derive(Debug, Clone, Copy)]
pub struct EnvoyConfig(pub ConfigEnvoyPtr);

// SAFETY: the pointer is only dereferenced by Envoy, in calls this module makes on the main
// thread while the configuration lives (see the type's documentation); worker threads only
// carry it.
unsafe impl Send for EnvoyConfig {}
// SAFETY: as above.
unsafe impl Sync for EnvoyConfig {}

impl EnvoyConfig {
    /// Defines a counter (`gauge: false`) or gauge named `name`; its id, `None` when refused.
    pub fn define(&self, name: &str, gauge: bool) -> Option<usize> {
        let mut id = 0;
        let name = ModuleBuffer::of(name.as_bytes());
        // SAFETY: `self.0` is the configuration Envoy handed the hook running now; `id`
        // outlives the call.
        let result = unsafe {
            if gauge {
                envoy_dynamic_module_callback_http_filter_config_define_gauge(
                    self.0,
                    name,
                    ptr::null(),
                    0,
                    &mut id,
                )
            } else {
                envoy_dynamic_module_callback_http_filter_config_define_counter(
                    self.0,
                    name,
                    ptr::null(),
                    0,
                    &mut id,
                )
            }
        };
        (result == METRICS_SUCCESS).then_some(id)
    }

    /// Adds `value` to counter `id`, from the main thread.
    pub fn increment_counter(&self, id: usize, value: u64) {
        // SAFETY: a live configuration, on the main thread; no labels.
        unsafe {
            envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.0,
                id,
                ptr::null(),
                0,
                value,
            );
        }
    }

    /// Adds `delta` to gauge `id`, from the main thread.
    pub fn adjust_gauge(&self, id: usize, delta: i64) {
        let value = delta.unsigned_abs();
        // SAFETY: a live configuration, on the main thread; no labels.
        unsafe {
            if delta >= 0 {
                envoy_dynamic_module_callback_http_filter_config_increment_gauge(
                    self.0,
                    id,
                    ptr::null(),
                    0,
                    value,
                );
            } else {
                envoy_dynamic_module_callback_http_filter_config_decrement_gauge(
                    self.0,
                    id,
                    ptr::null(),
                    0,
                    value,
                );
            }
        }
    }

    /// Sends an HTTP callout to `cluster` from the main thread; its id, or Envoy's result
    /// when refused. The answer comes to `on_http_filter_config_http_callout_done`, possibly
    /// before this returns.
    pub fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, i32> {
        let headers: Vec<HttpHeader> = headers
            .iter()
            .map(|(name, value)| HttpHeader::of(name, value.as_bytes()))
            .collect();
        let mut id = 0;
        // SAFETY: a live configuration, on the main thread; every buffer outlives the call,
        // which copies them.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_config_http_callout(
                self.0,
                &mut id,
                ModuleBuffer::of(cluster.as_bytes()),
                headers.as_ptr(),
                headers.len(),
                ModuleBuffer::of(body),
                timeout_ms,
            )
        };
        if result == CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// A scheduler that runs `on_http_filter_config_scheduled` on the main thread; `None`
    /// when Envoy gave none. Made during `on_http_filter_config_new`.
    pub fn scheduler(&self) -> Option<ConfigScheduler> {
        // SAFETY: a live configuration, in its creation hook.
        let scheduler =
            unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) };
        (!scheduler.is_null()).then_some(ConfigScheduler(scheduler))
    }
}

/// Envoy's scheduler of a configuration: `commit` may be called from any thread (Envoy
/// posts the event to its main thread, and drops it once the configuration is gone).
#[derive(Debug, Clone, Copy)]
pub struct ConfigScheduler(*mut c_void);

// SAFETY: Envoy's scheduler is made to be committed from any thread; it is deleted once,
// after the only thread that commits has been joined (`hooks.rs`).
unsafe impl Send for ConfigScheduler {}

impl ConfigScheduler {
    /// Posts event `id` to the main thread.
    pub fn commit(&self, id: u64) {
        // SAFETY: a scheduler not yet deleted (the type's contract).
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, id) }
    }

    /// Deletes the scheduler: no commit may follow.
    pub fn delete(self) {
        // SAFETY: made by `scheduler_new`, deleted once.
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
    }
}

/// Envoy's filter of one stream, valid from `on_http_filter_new` to
/// `on_http_filter_destroy`; every method is one callback.
#[derive(Debug, Clone, Copy)]
pub struct EnvoyFilter(pub FilterEnvoyPtr);

impl EnvoyFilter {
    /// Adds `value` to counter `id`.
    pub fn increment_counter(&self, id: usize, value: u64) {
        // SAFETY: a live filter (the type's contract); no labels.
        unsafe {
            envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                id,
                ptr::null(),
                0,
                value,
            );
        }
    }

    /// Adds `delta` to gauge `id`.
    pub fn adjust_gauge(&self, id: usize, delta: i64) {
        let value = delta.unsigned_abs();
        // SAFETY: a live filter; no labels.
        unsafe {
            if delta >= 0 {
                envoy_dynamic_module_callback_http_filter_increment_gauge(
                    self.0,
                    id,
                    ptr::null(),
                    0,
                    value,
                );
            } else {
                envoy_dynamic_module_callback_http_filter_decrement_gauge(
                    self.0,
                    id,
                    ptr::null(),
                    0,
                    value,
                );
            }
        }
    }

    /// Every header of a map, in order.
    pub fn headers(&self, map: HeaderType) -> Vec<(String, Vec<u8>)> {
        // SAFETY: a live filter; the vector has room for the count Envoy just gave.
        unsafe {
            let size = envoy_dynamic_module_callback_http_get_headers_size(self.0, map as i32);
            let mut headers = vec![HttpHeader::EMPTY; size];
            if size == 0
                || !envoy_dynamic_module_callback_http_get_headers(
                    self.0,
                    map as i32,
                    headers.as_mut_ptr(),
                )
            {
                return Vec::new();
            }
            headers
                .iter()
                .map(|header| {
                    let (name, value) = header.parts();
                    (String::from_utf8_lossy(name).into_owned(), value.to_vec())
                })
                .collect()
        }
    }

    /// The first value of header `name`.
    pub fn header(&self, map: HeaderType, name: &str) -> Option<Vec<u8>> {
        let mut value = EnvoyBuffer::EMPTY;
        // SAFETY: a live filter; `value` outlives the call and is read during this hook.
        unsafe {
            let found = envoy_dynamic_module_callback_http_get_header(
                self.0,
                map as i32,
                ModuleBuffer::of(name.as_bytes()),
                &mut value,
                0,
                ptr::null_mut(),
            );
            (found && !value.ptr.is_null()).then(|| value.bytes().to_vec())
        }
    }

    /// Sets request header `name` to `value`, or removes it (`None`).
    pub fn set_request_header(&self, name: &str, value: Option<&[u8]>) -> bool {
        let value = value.map_or(ModuleBuffer::NULL, ModuleBuffer::of);
        // SAFETY: a live filter; both buffers outlive the call, which copies them.
        unsafe {
            envoy_dynamic_module_callback_http_set_header(
                self.0,
                HeaderType::Request as i32,
                ModuleBuffer::of(name.as_bytes()),
                value,
            )
        }
    }

    /// Sends a local reply (Envoy's `sendLocalReply`, response code details `details`).
    pub fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8], details: &str) {
        let headers: Vec<HttpHeader> = headers
            .iter()
            .map(|(name, value)| HttpHeader::of(name, value.as_bytes()))
            .collect();
        // SAFETY: a live filter; every buffer outlives the call.
        unsafe {
            envoy_dynamic_module_callback_http_send_response(
                self.0,
                u32::from(status),
                headers.as_ptr(),
                headers.len(),
                ModuleBuffer::of(body),
                ModuleBuffer::of(details.as_bytes()),
            );
        }
    }

    /// Bytes in a body buffer.
    pub fn body_size(&self, body: BodyType) -> usize {
        // SAFETY: a live filter.
        unsafe { envoy_dynamic_module_callback_http_get_body_size(self.0, body as i32) }
    }

    /// The bytes of a body buffer, appended to `out`.
    pub fn read_body(&self, body: BodyType, out: &mut Vec<u8>) {
        // SAFETY: a live filter; the vector has room for the chunk count Envoy just gave,
        // and the chunks are read during this hook.
        unsafe {
            let count =
                envoy_dynamic_module_callback_http_get_body_chunks_size(self.0, body as i32);
            if count == 0 {
                return;
            }
            let mut chunks = vec![EnvoyBuffer::EMPTY; count];
            if envoy_dynamic_module_callback_http_get_body_chunks(
                self.0,
                body as i32,
                chunks.as_mut_ptr(),
            ) {
                for chunk in &chunks {
                    out.extend_from_slice(chunk.bytes());
                }
            }
        }
    }

    /// Whether the chunk of this hook is the body the filter buffered (it must not be
    /// counted twice).
    pub fn received_is_buffered(&self, request: bool) -> bool {
        // SAFETY: a live filter.
        unsafe {
            if request {
                envoy_dynamic_module_callback_http_received_buffered_request_body(self.0)
            } else {
                envoy_dynamic_module_callback_http_received_buffered_response_body(self.0)
            }
        }
    }

    /// A string attribute.
    pub fn attribute_string(&self, attribute: Attribute) -> Option<Vec<u8>> {
        let mut value = EnvoyBuffer::EMPTY;
        // SAFETY: a live filter; `value` is read during this hook.
        unsafe {
            envoy_dynamic_module_callback_http_filter_get_attribute_string(
                self.0,
                attribute as i32,
                &mut value,
            )
            .then(|| value.bytes().to_vec())
        }
    }

    /// An integer attribute.
    pub fn attribute_int(&self, attribute: Attribute) -> Option<u64> {
        let mut value = 0;
        // SAFETY: a live filter; `value` outlives the call.
        unsafe {
            envoy_dynamic_module_callback_http_filter_get_attribute_int(
                self.0,
                attribute as i32,
                &mut value,
            )
            .then_some(value)
        }
    }

    /// Sends an HTTP callout to `cluster` from this stream; its id, `None` when refused.
    /// The answer comes to `on_http_filter_http_callout_done`.
    pub fn http_callout(
        &self,
        cluster: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout_ms: u64,
    ) -> Result<u64, i32> {
        let headers: Vec<HttpHeader> = headers
            .iter()
            .map(|(name, value)| HttpHeader::of(name, value.as_bytes()))
            .collect();
        let mut id = 0;
        // SAFETY: a live filter; every buffer outlives the call, which copies them.
        let result = unsafe {
            envoy_dynamic_module_callback_http_filter_http_callout(
                self.0,
                &mut id,
                ModuleBuffer::of(cluster.as_bytes()),
                headers.as_ptr(),
                headers.len(),
                ModuleBuffer::of(body),
                timeout_ms,
            )
        };
        if result == CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// A scheduler that runs `on_http_filter_scheduled` for this stream on its worker
    /// thread; `None` when Envoy gave none. Made in one of the stream's hooks, or holding
    /// its worker's lock (Envoy reads the stream's dispatcher).
    pub fn scheduler(&self) -> Option<StreamScheduler> {
        // SAFETY: a live filter whose callbacks are set (it ran a hook).
        let scheduler = unsafe { envoy_dynamic_module_callback_http_filter_scheduler_new(self.0) };
        (!scheduler.is_null()).then_some(StreamScheduler(scheduler))
    }

    /// Resumes the held request.
    pub fn continue_decoding(&self) {
        // SAFETY: a live filter.
        unsafe { envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    /// Resumes the held response.
    pub fn continue_encoding(&self) {
        // SAFETY: a live filter.
        unsafe { envoy_dynamic_module_callback_http_filter_continue_encoding(self.0) }
    }
}

/// Envoy's scheduler of one stream: `commit` posts to the stream's worker, which runs the
/// event after the callbacks of its current event-loop turn, and drops it once the stream
/// is gone (`docs/envoy-facts.md#dynamic-modules`).
#[derive(Debug)]
pub struct StreamScheduler(*mut c_void);

impl StreamScheduler {
    /// Posts event `id` to the stream's worker.
    pub fn commit(&self, id: u64) {
        // SAFETY: a scheduler not yet deleted (deleting takes it by value).
        unsafe { envoy_dynamic_module_callback_http_filter_scheduler_commit(self.0, id) }
    }

    /// Deletes the scheduler: no commit may follow.
    pub fn delete(self) {
        // SAFETY: made by `scheduler_new`, deleted once.
        unsafe { envoy_dynamic_module_callback_http_filter_scheduler_delete(self.0) }
    }
}
