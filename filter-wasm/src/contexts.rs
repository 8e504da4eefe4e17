//! The entry point and the proxy-wasm contexts: each callback becomes one
//! call of a driver.
//!
//! The root context forwards to [`Root`], each HTTP context to its
//! [`Stream`]; the verdict comes back as the callback's return value. A stream's
//! driver is shared with the root context, which delivers the answers to the calls it
//! sent for the stream. Nothing here decides anything
//! (`docs/stream-machine.md#the-driver`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use keyflight_filter::coalesce::Delivery;
use keyflight_filter::drive::host::{CalloutAnswered, Driver};
use keyflight_filter::drive::stream::{Callback, Stream, Verdict};
use keyflight_filter::drive::worker::Root;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, ContextType, LogLevel};

use crate::host::{Counters, HostCalls};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    // After set_log_level, which installs the SDK's own hook: this one names
    // keyflight in the log line and cannot panic itself (the SDK's unwraps
    // its log call). The VM still dies; the line says where and why.
    std::panic::set_hook(Box::new(|panic| {
        crate::host::log(LogLevel::Critical, &format!("panic, the Wasm VM stops: {panic}"));
    }));
    proxy_wasm::set_root_context(|id| -> Box<dyn proxy_wasm::traits::RootContext> {
        Box::new(RootContext {
            id,
            driver: Root::default(),
            counters: Rc::default(),
            streams: Rc::default(),
        })
    });
}}

/// The streams of this worker by context id, for the root context to deliver the answers
/// to the calls it sent for them (`docs/stream-machine.md#coalesced-calls`).
type Streams = Rc<RefCell<HashMap<u32, Weak<RefCell<Stream>>>>>;

/// The root context: its driver, the counters its host calls increment, and the
/// streams it delivers answers to.
struct RootContext {
    id: u32,
    driver: Root,
    counters: Rc<Counters>,
    streams: Streams,
}

impl RootContext {
    /// Hands each stream the answer the root context received for its call. The calls
    /// streams queue meanwhile go out once all are handed theirs, and what those are
    /// answered at once (a refused dispatch) is handed over in turn.
    /// At most `MAX_HANDED_PER_CALLBACK` per callback: the rest after a wake-up.
    fn deliver(&mut self) {
        loop {
            let mut host = HostCalls::new(&self.counters);
            let deliveries = self.driver.take_deliveries(&mut host);
            if deliveries.is_empty() {
                break;
            }
            self.hand_over(deliveries);
            let mut host = HostCalls::new(&self.counters);
            self.driver.on_wake(&mut host);
        }
        self.driver.callback_returned();
    }

    /// The host acts on the stream for what its driver does meanwhile
    /// (`proxy_set_effective_context`); resumes and replies it defers until this callback
    /// returns, as for a stream's own callout (`docs/envoy-facts.md#waking-the-root-context`).
    fn hand_over(&mut self, deliveries: Vec<Delivery>) {
        for delivery in deliveries {
            let stream = self
                .streams
                .borrow()
                .get(&delivery.stream)
                .and_then(Weak::upgrade);
            let Some(stream) = stream else { continue };
            let Ok(mut stream) = stream.try_borrow_mut() else {
                continue;
            };
            if hostcalls::set_effective_context(delivery.stream).is_ok() {
                let mut host = HostCalls::new(&self.counters);
                stream.on_delivered(delivery.answer, &mut host);
            }
        }
        let _ = hostcalls::set_effective_context(self.id);
    }
}

impl proxy_wasm::traits::Context for RootContext {
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _: usize,
    ) {
        let answered = CalloutAnswered {
            token,
            num_headers,
            body_size,
        };
        let mut host = HostCalls::new(&self.counters);
        self.driver.on_call_answer(answered, &mut host);
        self.deliver();
    }

    /// The root context may ask to stay until its outbox is settled.
    fn on_done(&mut self) -> bool {
        let mut host = HostCalls::new(&self.counters);
        self.driver.on_done(&mut host)
    }
}

impl proxy_wasm::traits::RootContext for RootContext {
    fn on_configure(&mut self, _size: usize) -> bool {
        let mut host = HostCalls::new(&self.counters);
        let configured = self.driver.configure(&mut host);
        if configured {
            self.counters = Rc::new(Counters::define());
        }
        configured
    }

    fn on_tick(&mut self) {
        let mut host = HostCalls::new(&self.counters);
        self.driver.on_tick(&mut host);
        self.deliver();
    }

    /// A stream queued a call: every stream's call of this event-loop turn goes out now.
    fn on_queue_ready(&mut self, queue_id: u32) {
        while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue_id) {}
        let mut host = HostCalls::new(&self.counters);
        self.driver.on_wake(&mut host);
        self.deliver();
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        let stream = Rc::new(RefCell::new(Stream::for_root(&self.driver, context_id)));
        self.streams
            .borrow_mut()
            .insert(context_id, Rc::downgrade(&stream));
        // The SDK panics if this returns `None`.
        Some(Box::new(StreamContext {
            id: context_id,
            stream,
            counters: Rc::clone(&self.counters),
            streams: Rc::clone(&self.streams),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// An HTTP stream's context: its driver, shared with the root context's delivery.
struct StreamContext {
    id: u32,
    stream: Rc<RefCell<Stream>>,
    counters: Rc<Counters>,
    streams: Streams,
}

impl StreamContext {
    fn callback(&mut self, callback: Callback) -> Action {
        let mut host = HostCalls::new(&self.counters);
        let Ok(mut stream) = self.stream.try_borrow_mut() else {
            return Action::Continue;
        };
        match stream.on_callback(callback, &mut host) {
            Verdict::Continue => Action::Continue,
            Verdict::Pause => Action::Pause,
        }
    }

    fn done(&mut self) {
        let mut host = HostCalls::new(&self.counters);
        if let Ok(mut stream) = self.stream.try_borrow_mut() {
            stream.on_done(&mut host);
        }
    }
}

/// The root context no longer delivers to a stream the host deleted.
impl Drop for StreamContext {
    fn drop(&mut self) {
        if let Ok(mut streams) = self.streams.try_borrow_mut() {
            streams.remove(&self.id);
        }
    }
}

impl proxy_wasm::traits::Context for StreamContext {
    /// The answer to a call the stream dispatched itself (a worker that does not coalesce).
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _: usize,
    ) {
        let answered = CalloutAnswered {
            token,
            num_headers,
            body_size,
        };
        let mut host = HostCalls::new(&self.counters);
        if let Ok(mut stream) = self.stream.try_borrow_mut() {
            stream.on_call_answer(answered, &mut host);
        }
    }

    fn on_done(&mut self) -> bool {
        self.done();
        true
    }
}

impl HttpContext for StreamContext {
    /// A guarded request is paused here, and the Envoy config sets
    /// `allow_on_headers_stop_iteration: true`, so the body callbacks still
    /// arrive while the headers are held (`docs/envoy-facts.md#pausing-and-buffering`).
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.callback(Callback::RequestHeaders { end_of_stream })
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.callback(Callback::RequestBody {
            buffered_bytes: body_size,
            end_of_stream,
        })
    }

    /// An HTTP/2 request with trailers ends here, not in the body callback.
    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        self.callback(Callback::RequestTrailers)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.callback(Callback::ResponseHeaders { end_of_stream })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.callback(Callback::ResponseBody {
            buffered_bytes: body_size,
            end_of_stream,
        })
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        self.callback(Callback::ResponseTrailers)
    }

    /// The access-log callback comes just before `on_done`; either one ends
    /// the stream for the machine, whichever the host delivers first.
    fn on_log(&mut self) {
        self.done();
    }
}
