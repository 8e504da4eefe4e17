//! The entry point and the proxy-wasm contexts: each callback becomes one
//! call of a driver.
//!
//! The root context forwards to [`Root`], each HTTP context to its
//! [`Stream`]; the verdict comes back as the callback's return value. What
//! both contexts share (callout answers, retirement) is one generic impl over
//! the pure side's [`Driver`] trait. Nothing here decides anything
//! (`docs/stream-machine.md#the-driver`).

use std::rc::Rc;

use keyflight_filter::drive::host::{CalloutAnswered, Driver};
use keyflight_filter::drive::stream::{Callback, Stream, Verdict};
use keyflight_filter::drive::worker::Root;
use proxy_wasm::traits::{HttpContext, RootContext};
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
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Context::<Root>::default())
    });
}}

/// A proxy-wasm context: a driver and the counters its host calls increment.
#[derive(Default)]
struct Context<D> {
    driver: D,
    counters: Rc<Counters>,
}

impl<D: Driver> proxy_wasm::traits::Context for Context<D> {
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
    }

    fn on_done(&mut self) -> bool {
        let mut host = HostCalls::new(&self.counters);
        self.driver.on_done(&mut host)
    }
}

impl RootContext for Context<Root> {
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
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics if this returns `None`.
        Some(Box::new(Context {
            driver: Stream::for_root(&self.driver),
            counters: Rc::clone(&self.counters),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

impl Context<Stream> {
    fn callback(&mut self, callback: Callback) -> Action {
        let mut host = HostCalls::new(&self.counters);
        match self.driver.on_callback(callback, &mut host) {
            Verdict::Continue => Action::Continue,
            Verdict::Pause => Action::Pause,
        }
    }
}

impl HttpContext for Context<Stream> {
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
        let mut host = HostCalls::new(&self.counters);
        self.driver.on_done(&mut host);
    }
}
