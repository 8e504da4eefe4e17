//! The subset of Envoy's HTTP dynamic-module ABI this adapter uses, declared by hand from
//! `source/extensions/dynamic_modules/abi/abi.h` (`filter-native/README.md#the-abi`), and
//! safe wrappers around each callback.
//!
//! Every symbol here was checked against the exports of the Envoy 1.40.0 binary
//! `scripts/envoy.sh` installs (`docs/envoy-facts.md#dynamic-modules`). The C enums are
//! `int`s; their values are the declaration order in the header. This file holds the types
//! and the declarations; `abi/config.rs` wraps the configuration's callbacks,
//! `abi/stream.rs` a stream's.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

mod config;
mod stream;
#[cfg(test)]
mod unlinked;

pub use config::{ConfigScheduler, EnvoyConfig};
pub use stream::{EnvoyFilter, StreamScheduler};

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

/// The shape of Envoy's unlabelled metric callbacks, the stream's and the configuration's:
/// (owner, id, label values, their count, value).
type MetricCall = unsafe extern "C" fn(*mut c_void, usize, *const ModuleBuffer, usize, u64) -> i32;

/// The shape of Envoy's callout callbacks, the stream's and the configuration's:
/// (owner, id out, cluster, headers, their count, body, timeout in ms).
type CalloutCall = unsafe extern "C" fn(
    *mut c_void,
    *mut u64,
    ModuleBuffer,
    *const HttpHeader,
    usize,
    ModuleBuffer,
    u64,
) -> i32;

/// Moves metric `id` of `owner` by `delta`: `increment` up, `decrement` down, no labels.
///
/// # Safety
/// `owner` is live for both callbacks, on a thread they may be called on.
unsafe fn adjust(
    owner: *mut c_void,
    increment: MetricCall,
    decrement: MetricCall,
    id: usize,
    delta: i64,
) {
    let call = if delta >= 0 { increment } else { decrement };
    // SAFETY: the caller's contract; no labels.
    unsafe {
        call(owner, id, ptr::null(), 0, delta.unsigned_abs());
    }
}

/// Sends an HTTP callout to `cluster` through `call`; its id, or Envoy's result when refused.
///
/// # Safety
/// `owner` is live for `call`, on a thread it may be called on.
unsafe fn callout(
    owner: *mut c_void,
    call: CalloutCall,
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
    // SAFETY: the caller's contract; every buffer outlives the call, which copies them.
    let result = unsafe {
        call(
            owner,
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
