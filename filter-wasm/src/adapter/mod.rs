//! The proxy-wasm glue: moves bytes between Envoy and the state machine.
//!
//! Every decision lives in [`filter::machine`]; this module only reads what the
//! host reports into [`Event`]s and performs the [`Action`]s that come back.
//! The comments marked FIELD-NOTES point at host behaviour that was checked on
//! Envoy 1.40 and that the code depends on.

mod host;

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action as HostAction, BufferType, ContextType, LogLevel, MapType};

use filter::config::{Config, parse_plugin_config};
use filter::epoch::EpochWatch;
use filter::identity;
use filter::machine::{self, Action, Event, Machine};
use filter::outbox::{CallId, Outbox, OutboxAction};
use filter::status_matrix;
use filter::store_call::{
    CallError, StoreCall, parse_ack_answer, parse_claim_answer, parse_epoch_answer,
};

use host::Counters;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    // After set_log_level, which installs the SDK's own hook: this one names
    // keyflight in the log line and cannot panic itself (the SDK's unwraps
    // its log call). The VM still dies; the line says where and why.
    std::panic::set_hook(Box::new(|panic| {
        host::log(LogLevel::Critical, &format!("panic, the Wasm VM stops: {panic}"));
    }));
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

/// What the root context shares with its streams (one worker thread).
struct Shared {
    config: Rc<Config>,
    counters: Counters,
    /// The worker's record outbox (F14); the root context drives it. It is
    /// the root's, not the configuration's: a reconfigured plugin keeps it.
    outbox: Rc<RefCell<Outbox>>,
    /// The operator epoch the edge cache is checked against (F9); `None`
    /// when no request can use the cache.
    epoch: Option<RefCell<EpochWatch>>,
}

impl Shared {
    /// The epoch streams may read the edge cache under now.
    fn cache_epoch(&self, now_ms: u64) -> Option<u64> {
        self.epoch
            .as_ref()
            .and_then(|watch| watch.try_borrow().ok()?.current(now_ms))
    }
}

/// The plugin's root context: configuration, counters, the record outbox,
/// which renews leases and delivers handed-off records from `on_tick` (F4,
/// F14), and the edge cache's operator epoch (F9).
#[derive(Default)]
struct Root {
    shared: Option<Rc<Shared>>,
    outbox: Option<Rc<RefCell<Outbox>>>,
    /// Outbox callouts in flight: token → which call.
    calls: BTreeMap<u32, CallId>,
    /// The epoch question in flight.
    epoch_call: Option<u32>,
    /// The host asked this root context to finish (`on_done`) while the
    /// outbox still held claims: it keeps ticking until they are settled.
    draining: bool,
}

impl Root {
    /// Performs what the outbox asked for.
    fn perform(&mut self, actions: Vec<OutboxAction>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let mut queue: VecDeque<OutboxAction> = actions.into();
        while let Some(action) = queue.pop_front() {
            match action {
                OutboxAction::Dispatch { id, call } => {
                    let store = &shared.config.lease_store;
                    match host::dispatch(store, &call, store.timeout) {
                        Some(token) => {
                            self.calls.insert(token, id);
                        }
                        None => {
                            if let Ok(mut outbox) = shared.outbox.try_borrow_mut() {
                                let answer = Err(CallError::Dispatch);
                                queue.extend(outbox.on_answer(id, answer, host::now_ms()));
                            }
                        }
                    }
                }
                OutboxAction::Count(metric) => shared.counters.increment(metric),
                OutboxAction::Adjust { gauge, delta } => shared.counters.adjust(gauge, delta),
                OutboxAction::Log { level, message } => host::log(log_level(level), &message),
            }
        }
    }
}

impl Context for Root {
    /// Answers to the outbox's calls (calls dispatched from `on_tick` answer
    /// to the root context).
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _: usize,
    ) {
        if self.epoch_call == Some(token) {
            self.epoch_call = None;
            let (status, body) = host::call_answer(num_headers, body_size);
            if let Some(shared) = &self.shared
                && let Some(Ok(mut watch)) = shared.epoch.as_ref().map(RefCell::try_borrow_mut)
            {
                watch.answered(parse_epoch_answer(status, &body));
            }
            return;
        }
        let Some(id) = self.calls.remove(&token) else {
            return;
        };
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let (status, body) = host::call_answer(num_headers, body_size);
        let result = parse_ack_answer(status, &body);
        let actions = match shared.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.on_answer(id, result, host::now_ms()),
            Err(_) => return,
        };
        self.perform(actions);
    }

    /// The host retires this root context (the plugin was reconfigured or is
    /// being removed). Claims still in the outbox would be forgotten with it
    /// — each one a same-body retry that runs again — so it asks to stay
    /// until they are settled: every delivery ends by its retry budget.
    fn on_done(&mut self) -> bool {
        let done = self
            .outbox
            .as_ref()
            .is_none_or(|outbox| outbox.try_borrow().is_ok_and(|o| o.is_empty()));
        self.draining = !done;
        if self.draining {
            host::log(
                LogLevel::Info,
                "plugin retired with claims in the record outbox: settling them first",
            );
        }
        done
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let json = host::buffer(BufferType::PluginConfiguration, usize::MAX);
        match parse_plugin_config(&json) {
            Ok(config) => {
                host::set_tick_period(config.tick_period());
                let outbox = Rc::clone(
                    self.outbox
                        .get_or_insert_with(|| Rc::new(RefCell::new(Outbox::new(0)))),
                );
                outbox.borrow_mut().set_max_bytes(config.outbox.max_bytes);
                self.shared = Some(Rc::new(Shared {
                    epoch: config
                        .edge_cache_in_use()
                        .map(|c| RefCell::new(EpochWatch::new(&c))),
                    config: Rc::new(config),
                    counters: Counters::define(),
                    outbox,
                }));
                true
            }
            Err(error) => {
                host::log(
                    LogLevel::Error,
                    &format!("invalid plugin configuration: {error}"),
                );
                false
            }
        }
    }

    fn on_tick(&mut self) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if let Some(Ok(mut watch)) = shared.epoch.as_ref().map(RefCell::try_borrow_mut)
            && watch.due(host::now_ms())
        {
            let store = &shared.config.lease_store;
            match host::dispatch_epoch(store, store.timeout) {
                Some(token) => self.epoch_call = Some(token),
                None => watch.not_sent(),
            }
        }
        let actions = match shared.outbox.try_borrow_mut() {
            Ok(mut outbox) => outbox.on_tick(host::now_ms()),
            Err(_) => return,
        };
        self.perform(actions);
        let settled = shared.outbox.try_borrow().is_ok_and(|o| o.is_empty());
        if self.draining && self.calls.is_empty() && settled {
            self.draining = false;
            host::log(LogLevel::Info, "record outbox settled; plugin retired");
            host::done();
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics if this returns `None`; without a configuration (the
        // plugin failed to start) a stream simply passes everything through.
        Some(Box::new(Stream {
            machine: self
                .shared
                .as_ref()
                .map(|s| Machine::new(Rc::clone(&s.config))),
            shared: self.shared.clone(),
            pending_call: None,
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// Which lease-store call a stream is waiting for.
#[derive(Debug, Clone, Copy)]
enum CallKind {
    Claim,
    Finalize,
    Release,
}

/// One HTTP stream.
struct Stream {
    machine: Option<Machine>,
    shared: Option<Rc<Shared>>,
    pending_call: Option<(u32, CallKind)>,
}

impl Stream {
    /// Feeds an event and performs the resulting actions; returns what the
    /// current host callback should return.
    fn run(&mut self, event: Event) -> HostAction {
        let (Some(machine), Some(shared)) = (self.machine.as_mut(), self.shared.clone()) else {
            return HostAction::Continue;
        };
        // The first Continue/Pause met is the callback's answer: a follow-up
        // event's actions run before the rest of the batch, so its verdict
        // comes before the one the machine gave before the read.
        let mut verdict = None;
        // Inside a host callback, a resume must be the callback's answer, not a
        // host call: Envoy defers a resume made during the callback until it
        // returns, then sees the callback's Pause after it, and the stream stops
        // for good. This happens when a store call fails to dispatch at once
        // (no healthy lease-store host) and the machine resumes right away.
        let in_callback = !matches!(
            event,
            Event::ClaimAnswered(_)
                | Event::FinalizeAnswered(_)
                | Event::ReleaseAnswered(_)
                | Event::StreamDone
        );
        let mut queue: VecDeque<Action> = machine.on(event).into();
        while let Some(action) = queue.pop_front() {
            let follow_up = match action {
                Action::ContinueRequest | Action::ContinueResponse => {
                    verdict.get_or_insert(HostAction::Continue);
                    None
                }
                Action::PauseRequest | Action::PauseResponse => {
                    verdict.get_or_insert(HostAction::Pause);
                    None
                }
                // FIELD-NOTES: pausing in the body callbacks buffered the body;
                // at end of stream the whole of it is readable at once.
                Action::ReadRequestBody { size } => Some(Event::RequestBodyComplete {
                    body: host::buffer(BufferType::HttpRequestBody, size),
                }),
                Action::ReadResponseBody { size } => Some(Event::ResponseBodyComplete {
                    body: host::buffer(BufferType::HttpResponseBody, size),
                }),
                Action::ReadResponseHeaders { end_of_stream } => Some(response_head(end_of_stream)),
                Action::SetRequestHeader { name, value } => {
                    host::set_request_header(&name, value.as_deref());
                    None
                }
                Action::ResumeRequest if in_callback => {
                    verdict = Some(HostAction::Continue);
                    None
                }
                Action::ResumeRequest => {
                    let _ = proxy_wasm::hostcalls::resume_http_request();
                    None
                }
                // F9: shared data is process-wide (every worker of this VM id);
                // a read is synchronous, so the answer is a follow-up event.
                Action::ReadEdgeCache { key } => {
                    let now_ms = host::now_ms();
                    Some(Event::EdgeCacheRead {
                        slot: host::shared_data(&key).0,
                        now_ms,
                        epoch: shared.cache_epoch(now_ms),
                    })
                }
                Action::WriteEdgeCache { key, entry } => {
                    if let Some(bytes) = entry.encode_at(host::now_ms()) {
                        host::replace_shared_data(&key, &bytes);
                    }
                    None
                }
                Action::LeaseLost { claim_id } => {
                    if let Ok(mut outbox) = shared.outbox.try_borrow_mut() {
                        for action in outbox.lease_lost(claim_id) {
                            if let OutboxAction::Count(metric) = action {
                                shared.counters.increment(metric);
                            }
                        }
                    }
                    None
                }
                // F7: the held response goes out only now, after the record
                // call answered.
                Action::ResumeResponse if in_callback => {
                    verdict = Some(HostAction::Continue);
                    None
                }
                Action::ResumeResponse => {
                    let _ = proxy_wasm::hostcalls::resume_http_response();
                    None
                }
                Action::CallStore { call, timeout } => {
                    let kind = match call {
                        StoreCall::Claim { .. } => CallKind::Claim,
                        StoreCall::Finalize { .. } => CallKind::Finalize,
                        StoreCall::Release { .. } | StoreCall::Renew { .. } => CallKind::Release,
                    };
                    match host::dispatch(&shared.config.lease_store, &call, timeout) {
                        Some(token) => {
                            self.pending_call = Some((token, kind));
                            None
                        }
                        None => Some(failed_call(kind, CallError::Dispatch)),
                    }
                }
                Action::Reply(reply) => {
                    host::send_reply(&reply);
                    None
                }
                Action::StartRenewal(lease) => {
                    if let Ok(mut outbox) = shared.outbox.try_borrow_mut() {
                        outbox.start(lease, host::now_ms());
                    }
                    None
                }
                Action::StopRenewal { claim_id } => {
                    if let Ok(mut outbox) = shared.outbox.try_borrow_mut() {
                        outbox.stop(claim_id);
                    }
                    None
                }
                Action::HandOff(handoff) => {
                    // The outbox's own actions are counters, gauges and logs;
                    // its calls go out from the root context's next tick.
                    let actions = match shared.outbox.try_borrow_mut() {
                        Ok(mut outbox) => outbox.hand_off(handoff, host::now_ms()),
                        Err(_) => Vec::new(),
                    };
                    for action in actions {
                        match action {
                            OutboxAction::Count(metric) => shared.counters.increment(metric),
                            OutboxAction::Adjust { gauge, delta } => {
                                shared.counters.adjust(gauge, delta)
                            }
                            OutboxAction::Log { level, message } => {
                                host::log(log_level(level), &message)
                            }
                            OutboxAction::Dispatch { .. } => {}
                        }
                    }
                    None
                }
                Action::Count(metric) => {
                    shared.counters.increment(metric);
                    None
                }
                Action::Log { level, message } => {
                    host::log(log_level(level), &message);
                    None
                }
            };
            if let Some(event) = follow_up {
                // The follow-up's actions run before the rest of this batch.
                for action in machine.on(event).into_iter().rev() {
                    queue.push_front(action);
                }
            }
        }
        verdict.unwrap_or(HostAction::Continue)
    }
}

fn log_level(level: machine::LogLevel) -> LogLevel {
    match level {
        machine::LogLevel::Info => LogLevel::Info,
        machine::LogLevel::Warn => LogLevel::Warn,
    }
}

/// The response head the machine asked for with `ReadResponseHeaders`.
fn response_head(end_of_stream: bool) -> Event {
    let status = host::header(MapType::HttpResponseHeaders, ":status")
        .and_then(|v| filter::store_call::parse_status(&v))
        .unwrap_or(502);
    // F6: Envoy marks responses that came from the upstream `via_upstream`;
    // for the ones it generated, the response flags and the attempt count say
    // whether the request may have reached the upstream (status_matrix).
    let origin = status_matrix::origin(
        host::property(&["response", "code_details"]).as_deref(),
        host::property(&["response", "flags"]).as_deref(),
        host::property(&["upstream", "request_attempt_count"]).as_deref(),
    );
    // FIELD-NOTES: pausing here (and in the body callbacks) holds the whole
    // response, headers included, until the finalize answer resumes it (F7).
    Event::ResponseHeadersRead {
        status,
        headers: host::headers(MapType::HttpResponseHeaders),
        origin,
        end_of_stream,
    }
}

/// The answer event for a call that could not even be dispatched.
fn failed_call(kind: CallKind, error: CallError) -> Event {
    match kind {
        CallKind::Claim => Event::ClaimAnswered(Err(error)),
        CallKind::Finalize => Event::FinalizeAnswered(Err(error)),
        CallKind::Release => Event::ReleaseAnswered(Err(error)),
    }
}

impl Context for Stream {
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _: usize,
    ) {
        let kind = match self.pending_call {
            Some((expected, kind)) if expected == token => kind,
            _ => return,
        };
        self.pending_call = None;
        let (status, body) = host::call_answer(num_headers, body_size);
        let event = match kind {
            CallKind::Claim => Event::ClaimAnswered(parse_claim_answer(status, &body)),
            CallKind::Finalize => Event::FinalizeAnswered(parse_ack_answer(status, &body)),
            CallKind::Release => Event::ReleaseAnswered(parse_ack_answer(status, &body)),
        };
        self.run(event);
    }

    fn on_done(&mut self) -> bool {
        self.run(Event::StreamDone);
        true
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> HostAction {
        let Some(shared) = self.shared.clone() else {
            return HostAction::Continue;
        };
        // FIELD-NOTES: the single-value getter shows only the first of a
        // repeated header; the full list is needed to refuse a repeated key.
        // It is also the only chance to capture request headers: after resume
        // they are gone.
        let headers = host::headers(MapType::HttpRequestHeaders);
        let principal = identity::resolve(&shared.config.identity, &headers, host::property);
        // FIELD-NOTES: a guarded request is paused here (the machine answers
        // PauseRequest) and the Envoy config sets
        // `allow_on_headers_stop_iteration: true`, so body callbacks still
        // arrive while the headers are held; returning Continue instead would
        // let the router start the upstream request before the claim.
        self.run(Event::RequestHeaders {
            headers,
            principal,
            end_of_stream,
        })
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> HostAction {
        // FIELD-NOTES: returning Pause until end of stream makes Envoy buffer
        // the body; the machine then asks for all of it at once.
        self.run(Event::RequestBodyChunk {
            buffered_bytes: body_size,
            end_of_stream,
        })
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> HostAction {
        // FIELD-NOTES: an HTTP/2 request with trailers ends here, not in the
        // body callback.
        self.run(Event::RequestTrailers)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> HostAction {
        // The machine asks for the status, headers and origin only when it
        // records this response (`ReadResponseHeaders`): a replay's own local
        // reply passes through without a host read.
        self.run(Event::ResponseHeaders { end_of_stream })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> HostAction {
        self.run(Event::ResponseBodyChunk {
            buffered_bytes: body_size,
            end_of_stream,
        })
    }

    /// The access-log callback comes just before `on_done`; either one
    /// ends the stream for the machine (renewal stops, F4), whichever the
    /// host delivers first.
    fn on_log(&mut self) {
        self.run(Event::StreamDone);
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> HostAction {
        self.run(Event::ResponseTrailers)
    }
}
