//! A stream's callbacks: its headers, bodies, attributes, replies, resumes, metrics,
//! callouts and scheduler, on its worker (`docs/envoy-facts.md#dynamic-modules`).
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

use super::*;

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
        // SAFETY: a live filter.
        unsafe {
            adjust(
                self.0,
                envoy_dynamic_module_callback_http_filter_increment_gauge,
                envoy_dynamic_module_callback_http_filter_decrement_gauge,
                id,
                delta,
            );
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
        let call = envoy_dynamic_module_callback_http_filter_http_callout;
        // SAFETY: a live filter, on its worker.
        unsafe { callout(self.0, call, cluster, headers, body, timeout_ms) }
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
