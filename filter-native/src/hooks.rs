//! The event hooks Envoy calls for a stream: each becomes one call of a driver, inside a
//! panic barrier. A configuration's hooks are in `config_hooks.rs`.
//!
//! A configuration is checked once on the main thread (an invalid one is refused, and
//! Envoy with it); each worker thread then keeps its own [`Root`] per configuration, as
//! each worker's Wasm VM keeps its root context, and each stream its [`Stream`]. The main
//! thread ticks every worker's `Root` and hands it the answers to its calls (`worker.rs`).
//! Nothing here decides anything (`docs/stream-machine.md#the-driver`).
//!
//! Every hook runs behind a panic barrier: a stream's that of `barrier.rs`, which also
//! orders what a stream's hook does, a root driver's that of `worker.rs`.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use keyflight_filter::drive::host::{CalloutAnswered, Driver};
use keyflight_filter::drive::stream::{Callback, Stream};
use keyflight_filter::drive::worker::Root;

use crate::abi::{ABI_VERSION, EnvoyBuffer, EnvoyFilter, FilterEnvoyPtr, HttpHeader};
use crate::barrier::{
    AfterPanic, CONTINUE, Filter, STOP, Work, abi_log_only, callback, destroy, filter_of, guarded,
    verdict,
};
use crate::host::{CallAnswer, NativeHost, buffered_bytes};
use crate::worker::Slot;

thread_local! {
    /// This worker's driver of each configuration.
    static ROOTS: RefCell<HashMap<u64, Arc<Slot>>> = RefCell::default();
    /// This worker's stream ids, for the driver's bookkeeping.
    static NEXT_STREAM: Cell<u32> = const { Cell::new(1) };
}

/// The ABI version the module was written for: Envoy compares it with its own, and only
/// warns on a mismatch (`docs/envoy-facts.md#dynamic-modules`).
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    ABI_VERSION.as_ptr()
}

/// A new stream on this worker: its driver, from this worker's root of the configuration
/// (made, and configured, on the worker's first stream under it).
///
/// # Safety
/// `config` is a live pointer `on_http_filter_config_new` returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _envoy: FilterEnvoyPtr,
) -> *const c_void {
    if config.is_null() {
        return std::ptr::null();
    }
    // SAFETY: the caller's contract.
    let plugin =
        Arc::clone(&unsafe { &*(config as *const crate::config_hooks::Configured) }.plugin);
    let made = catch_unwind(AssertUnwindSafe(|| {
        #[cfg(feature = "test-panic")]
        crate::test_panic::test_panic_on_new(&plugin);
        let id = NEXT_STREAM.with(|next| {
            let id = next.get();
            next.set(id.wrapping_add(1));
            id
        });
        let slot = ROOTS.with(|roots| {
            let mut roots = roots.borrow_mut();
            let slot = roots.entry(plugin.id).or_insert_with(|| {
                let mut root = Root::default();
                root.configure(&mut NativeHost::configuring(&plugin));
                let slot = Arc::new(Slot::new(root));
                plugin.adopt(&slot);
                slot
            });
            Arc::clone(slot)
        });
        let stream = slot.stream(id)?;
        Some(
            Box::into_raw(Box::new(Filter::new(Arc::clone(&plugin), slot, id, stream)))
                as *const c_void,
        )
    }));
    match made {
        Ok(Some(filter)) => filter,
        Ok(None) => std::ptr::null(),
        Err(_) => {
            abi_log_only("keyflight: panic while creating a stream: the stream is refused");
            std::ptr::null()
        }
    }
}

/// A guarded request is held here (`StopIteration`): its body still arrives, and is
/// buffered (`docs/envoy-facts.md#dynamic-modules`). The stream's first hook: from now on
/// its worker's root driver may use it (`turn.rs`).
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    end_of_stream: bool,
) -> i32 {
    // SAFETY: Envoy's arguments.
    if let Some(filter) = unsafe { filter_of(module) }
        && catch_unwind(AssertUnwindSafe(|| filter.join(EnvoyFilter(envoy), module))).is_err()
    {
        abi_log_only("keyflight: panic while registering a stream with its worker");
    }
    // SAFETY: Envoy's arguments.
    unsafe {
        on_callback(envoy, module, || {
            #[cfg(feature = "test-panic")]
            crate::test_panic::test_panic(envoy, crate::test_panic::TestPanic::RequestHeaders);
            Callback::RequestHeaders { end_of_stream }
        })
    }
}

/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    end_of_stream: bool,
) -> i32 {
    // SAFETY: Envoy's arguments.
    unsafe {
        on_callback(envoy, module, || Callback::RequestBody {
            buffered_bytes: buffered_bytes(EnvoyFilter(envoy), true),
            end_of_stream,
        })
    }
}

/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
) -> i32 {
    // SAFETY: Envoy's arguments.
    unsafe { on_callback(envoy, module, || Callback::RequestTrailers) }
}

/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    end_of_stream: bool,
) -> i32 {
    // SAFETY: Envoy's arguments.
    unsafe {
        on_callback(envoy, module, || Callback::ResponseHeaders {
            end_of_stream,
        })
    }
}

/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    end_of_stream: bool,
) -> i32 {
    // SAFETY: Envoy's arguments.
    unsafe {
        on_callback(envoy, module, || Callback::ResponseBody {
            buffered_bytes: buffered_bytes(EnvoyFilter(envoy), false),
            end_of_stream,
        })
    }
}

/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
) -> i32 {
    // SAFETY: Envoy's arguments.
    unsafe { on_callback(envoy, module, || Callback::ResponseTrailers) }
}

/// One stream callback, made by `make` inside the panic barrier: the driver's verdict, or
/// `StopIteration` after a panic, which answered the stream 503.
///
/// # Safety
/// Envoy's arguments, during the hook that calls this.
unsafe fn on_callback(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    make: impl FnOnce() -> Callback,
) -> i32 {
    // SAFETY: the caller's contract.
    unsafe {
        guarded(
            envoy,
            module,
            AfterPanic::Reply(STOP),
            callback(|stream, host| verdict(stream.on_callback(make(), host))),
        )
    }
}

/// The stream ended: a claim it could not settle is the outbox's now.
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
) {
    // SAFETY: Envoy's arguments.
    unsafe {
        guarded(
            envoy,
            module,
            AfterPanic::LogOnly,
            callback(|stream, host| {
                #[cfg(feature = "test-panic")]
                crate::test_panic::test_panic(envoy, crate::test_panic::TestPanic::StreamComplete);
                stream.on_done(host);
                CONTINUE
            }),
        );
    }
}

/// # Safety
/// A pointer `on_http_filter_new` returned, once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(module: *const c_void) {
    // SAFETY: made by `Box::into_raw` in `on_http_filter_new`; Envoy destroys once.
    if catch_unwind(|| unsafe { destroy(module) }).is_err() {
        abi_log_only("keyflight: panic while dropping a stream");
    }
}

/// A callout this stream sent answered; a failed one arrives with no headers. One the
/// worker's root driver sent as this stream's is the root driver's (`turn.rs`).
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    callout_id: u64,
    result: i32,
    headers: *const HttpHeader,
    headers_size: usize,
    body_chunks: *const EnvoyBuffer,
    body_chunks_size: usize,
) {
    // SAFETY: Envoy's arrays and their lengths, valid during this hook.
    let (headers, body) =
        unsafe { answer_parts(result, headers, headers_size, body_chunks, body_chunks_size) };
    let Ok(token) = u32::try_from(callout_id) else {
        return;
    };
    let copied = catch_unwind(|| CallAnswer::copy(headers, body));
    let Ok(answer) = copied else {
        abi_log_only("keyflight: panic while reading a callout answer");
        return;
    };
    let answered = CalloutAnswered {
        token,
        num_headers: answer.headers.len(),
        body_size: answer.body.len(),
    };
    // SAFETY: Envoy's arguments.
    let carried = match unsafe { filter_of(module) } {
        Some(filter) => match catch_unwind(AssertUnwindSafe(|| filter.carried(callout_id))) {
            Ok(token) => token.map(|token| (filter, token)),
            Err(_) => return abi_log_only("keyflight: panic while reading a callout's caller"),
        },
        None => None,
    };
    if let Some((filter, token)) = carried {
        let answered = CalloutAnswered { token, ..answered };
        let turn = || filter.turn(EnvoyFilter(envoy), Some((answered, answer)));
        if catch_unwind(AssertUnwindSafe(turn)).is_err() {
            abi_log_only("keyflight: panic in a turn of a worker's root driver");
        }
        return;
    }
    let work = Work::<fn(&mut Stream, &mut NativeHost<'_>) -> i32>::Answer(answered, answer);
    // SAFETY: Envoy's arguments.
    unsafe {
        guarded(envoy, module, AfterPanic::Reply(CONTINUE), work);
    }
}

/// A callout's headers (none when it failed) and body chunks, as slices.
///
/// # Safety
/// Envoy's arrays and their lengths, valid during the hook that calls this.
pub unsafe fn answer_parts<'a>(
    result: i32,
    headers: *const HttpHeader,
    headers_size: usize,
    body_chunks: *const EnvoyBuffer,
    body_chunks_size: usize,
) -> (&'a [HttpHeader], &'a [EnvoyBuffer]) {
    let headers = if headers.is_null() || result != 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(headers, headers_size) }
    };
    let body = if body_chunks.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(body_chunks, body_chunks_size) }
    };
    (headers, body)
}

/// Streamed callouts and watermarks: Envoy requires the hooks; the filter uses none of them.
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _headers: *const HttpHeader,
    _headers_size: usize,
    _end_stream: bool,
) {
}

/// See [`envoy_dynamic_module_on_http_filter_http_stream_headers`].
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _data: *const EnvoyBuffer,
    _data_count: usize,
    _end_stream: bool,
) {
}

/// See [`envoy_dynamic_module_on_http_filter_http_stream_headers`].
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _trailers: *const HttpHeader,
    _trailers_size: usize,
) {
}

/// See [`envoy_dynamic_module_on_http_filter_http_stream_headers`].
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
) {
}

/// See [`envoy_dynamic_module_on_http_filter_http_stream_headers`].
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _reason: i32,
) {
}

/// The wake-up a stream of this worker committed (`turn.rs`): a turn of the worker's root
/// driver, which sends the calls its streams queued and hands over the answers it holds.
///
/// # Safety
/// Envoy's arguments, during this hook.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    envoy: FilterEnvoyPtr,
    module: *const c_void,
    _event: u64,
) {
    // SAFETY: Envoy's arguments.
    if let Some(filter) = unsafe { filter_of(module) }
        && catch_unwind(AssertUnwindSafe(|| filter.turn(EnvoyFilter(envoy), None))).is_err()
    {
        abi_log_only("keyflight: panic in a turn of a worker's root driver");
    }
}

/// See [`envoy_dynamic_module_on_http_filter_http_stream_headers`].
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
) {
}

/// See [`envoy_dynamic_module_on_http_filter_http_stream_headers`].
#[unsafe(no_mangle)]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _envoy: FilterEnvoyPtr,
    _module: *const c_void,
) {
}
