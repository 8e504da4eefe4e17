//! The stream driver: runs the machine for one host callback or answer and
//! performs what it asks through the [`Host`] (`docs/stream-machine.md#the-driver`).
//!
//! This is the loop the adapter used to hold, with the three host rules it
//! encodes (`docs/stream-machine.md#callback-rules`):
//!
//! - a read the host answers at once (a body, the response head, an
//!   edge-cache slot, a call the host refused to dispatch) is a follow-up
//!   event whose actions run *before* the rest of the batch;
//! - the first `Continue…`/`Pause…` met is the callback's answer;
//! - a resume inside a host callback is not a host call but that callback's
//!   answer: Envoy defers a resume made during a callback and then sees the
//!   callback's `Pause` after it, and the stream would stop for good
//!   (`docs/envoy-facts.md#callbacks-and-resumes`).
//!
//! Which events are callbacks is a matter of types: [`Stream::on_callback`]
//! takes a [`Callback`] and returns its [`Verdict`]; call answers and the
//! stream's end return nothing. The adapter turns each proxy-wasm callback
//! into one of these calls and nothing else, and the native tests and the
//! proptest drive this same code through a fake host.

use std::collections::VecDeque;
use std::rc::Rc;

use super::host::{Buffer, CalloutAnswered, Driver, HeaderMap, Host, LogLevel, read_answer};
use super::worker::{Root, Worker};
use crate::coalesce::{Queued, StreamId};
use crate::identity;
use crate::log;
use crate::machine::{Action, Event, Machine};
use crate::status_matrix;
use crate::store_call::{Answer, Callout, parse_status};

/// What a host callback returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the headers or body through.
    Continue,
    /// Hold them (and, at the end of a body, buffer it).
    Pause,
}

/// A proxy-wasm callback on an HTTP stream that returns a [`Verdict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    /// `on_http_request_headers`.
    RequestHeaders {
        /// The request has no body.
        end_of_stream: bool,
    },
    /// `on_http_request_body`.
    RequestBody {
        /// Bytes buffered by the host so far.
        buffered_bytes: usize,
        /// This is the last chunk.
        end_of_stream: bool,
    },
    /// `on_http_request_trailers`.
    RequestTrailers,
    /// `on_http_response_headers`.
    ResponseHeaders {
        /// The response has no body.
        end_of_stream: bool,
    },
    /// `on_http_response_body`.
    ResponseBody {
        /// Bytes buffered by the host so far.
        buffered_bytes: usize,
        /// This is the last chunk.
        end_of_stream: bool,
    },
    /// `on_http_response_trailers`.
    ResponseTrailers,
}

/// One HTTP stream: its machine, the worker it belongs to, and the callout
/// it waits for.
#[derive(Debug)]
pub struct Stream {
    /// The host's name for it (its context id), which the root context delivers
    /// answers to.
    id: StreamId,
    /// `None` when the plugin has no valid configuration: the stream then
    /// passes everything through.
    run: Option<(Machine, Rc<Worker>)>,
    /// The store call in flight (one at a time).
    call: Option<InFlight>,
}

/// A stream's store call in flight, and when it was made (the host's clock, ms).
#[derive(Debug, Clone, Copy)]
enum InFlight {
    /// Dispatched by the stream itself: its answer comes with this token.
    Dispatched { token: u32, since_ms: u64 },
    /// Queued for the root context, which delivers the answer
    /// (`docs/stream-machine.md#coalesced-calls`).
    Queued { since_ms: u64 },
    /// The reconcile question to the service: its answer comes with this token.
    Asked { token: u32 },
}

impl Stream {
    /// The driver of a new HTTP stream on `root`'s worker. Without a
    /// configuration (the plugin failed to start) the stream passes everything
    /// through.
    pub fn for_root(root: &Root, id: StreamId) -> Self {
        match root.worker() {
            Some(worker) => Stream::new(Rc::clone(worker), id),
            None => Stream::unconfigured(id),
        }
    }

    /// Stream `id` of `worker`.
    pub fn new(worker: Rc<Worker>, id: StreamId) -> Self {
        Stream {
            id,
            run: Some((Machine::new(Rc::clone(&worker.config)), worker)),
            call: None,
        }
    }

    /// A stream of a plugin that failed to configure: every callback continues.
    pub fn unconfigured(id: StreamId) -> Self {
        Stream {
            id,
            run: None,
            call: None,
        }
    }

    /// The root context delivers the answer to the call this stream queued (an ended
    /// stream's machine takes nothing from it).
    /// That is also how the answer to a reconcile question comes that the stream
    /// dispatched inside the root context's callback.
    pub fn on_delivered(&mut self, answer: Answer, host: &mut impl Host) {
        match self.call {
            Some(InFlight::Queued { since_ms }) => {
                self.call = None;
                let elapsed_ms = host.now_ms().saturating_sub(since_ms);
                self.drive(Event::StoreAnswered { answer, elapsed_ms }, false, host);
            }
            Some(InFlight::Asked { .. }) => {
                self.call = None;
                self.drive(Event::ServiceAnswered { answer }, false, host);
            }
            _ => {}
        }
    }

    /// A host callback; returns what the callback returns.
    pub fn on_callback(&mut self, callback: Callback, host: &mut impl Host) -> Verdict {
        let Some((_, worker)) = &self.run else {
            return Verdict::Continue;
        };
        let event = match callback {
            Callback::RequestHeaders { end_of_stream } => {
                // The full list: the single-value getter shows only the first
                // of a repeated header, and after the resume the request's
                // headers are gone (`docs/envoy-facts.md#headers`).
                let headers = host.headers(HeaderMap::Request);
                let identity = &worker.config.identity;
                let principal = identity::resolve(identity, &headers, |path| host.property(path));
                let previous_principal = identity.previous.as_deref().map(|previous| {
                    identity::resolve(previous, &headers, |path| host.property(path))
                });
                Event::RequestHeaders {
                    headers,
                    principal,
                    previous_principal,
                    end_of_stream,
                }
            }
            Callback::RequestBody {
                buffered_bytes,
                end_of_stream,
            } => Event::RequestBodyChunk {
                buffered_bytes,
                end_of_stream,
            },
            Callback::RequestTrailers => Event::RequestTrailers,
            // Nothing is read yet: the machine asks for the head only for a
            // response it records, so a replay's own reply costs no reads.
            // Pausing here and in the body callbacks holds the whole response,
            // headers included, until the settle call's answer resumes it (F7,
            // `docs/envoy-facts.md#pausing-and-buffering`).
            Callback::ResponseHeaders { end_of_stream } => Event::ResponseHeaders { end_of_stream },
            Callback::ResponseBody {
                buffered_bytes,
                end_of_stream,
            } => Event::ResponseBodyChunk {
                buffered_bytes,
                end_of_stream,
            },
            Callback::ResponseTrailers => Event::ResponseTrailers,
        };
        self.drive(event, true, host).unwrap_or_else(|| {
            host.log(
                LogLevel::Warn,
                "the stream machine gave no answer for a callback; continuing",
            );
            Verdict::Continue
        })
    }

    /// Feeds `event` and performs its actions with their follow-ups; returns
    /// the first verdict met.
    fn drive(&mut self, event: Event, in_callback: bool, host: &mut impl Host) -> Option<Verdict> {
        let (machine, worker) = self.run.as_mut()?;
        let mut verdict = None;
        let mut queue: VecDeque<Action> = machine.on(event).into();
        while let Some(action) = queue.pop_front() {
            let follow_up = match action {
                Action::ContinueRequest | Action::ContinueResponse => {
                    verdict.get_or_insert(Verdict::Continue);
                    None
                }
                Action::PauseRequest | Action::PauseResponse => {
                    verdict.get_or_insert(Verdict::Pause);
                    None
                }
                Action::ResumeRequest | Action::ResumeResponse if in_callback => {
                    verdict = Some(Verdict::Continue);
                    None
                }
                Action::ResumeRequest => {
                    host.resume_request();
                    None
                }
                // F7: the held response goes out only now, after the record
                // call answered.
                Action::ResumeResponse => {
                    host.resume_response();
                    None
                }
                // Pausing in the body callbacks buffered the body; at its end
                // the whole of it is readable at once
                // (`docs/envoy-facts.md#pausing-and-buffering`).
                Action::ReadRequestBody { size } => Some(Event::RequestBodyComplete {
                    body: host.buffer(Buffer::RequestBody, size),
                }),
                Action::ReadResponseBody { size } => Some(Event::ResponseBodyComplete {
                    body: host.buffer(Buffer::ResponseBody, size),
                }),
                Action::ReadResponseHeaders { end_of_stream } => {
                    Some(response_head(host, end_of_stream))
                }
                Action::SetRequestHeader { name, value } => {
                    host.set_request_header(&name, value.as_deref());
                    None
                }
                // Shared data is process-wide (every worker of this VM); a
                // read is synchronous, so its answer is a follow-up.
                Action::ReadBodyDigest { key } => Some(Event::BodyDigestRead {
                    slot: host.shared_data(&key),
                }),
                Action::WriteBodyDigest { key, value } => {
                    host.replace_shared_data(&key, &value);
                    None
                }
                // F9: the edge cache is in shared data too.
                Action::ReadEdgeCache { key } => {
                    let now_ms = host.now_ms();
                    Some(Event::EdgeCacheRead {
                        slot: host.shared_data(&key),
                        now_ms,
                        epoch: worker.cache_epoch(now_ms),
                    })
                }
                Action::WriteEdgeCache { key, entry } => {
                    if let Some(bytes) = entry.encode_at(host.now_ms()) {
                        host.replace_shared_data(&key, &bytes);
                    }
                    None
                }
                // Queued for the root context when the worker coalesces; its answer
                // then comes through `on_delivered`, after this callback.
                Action::CallStore { call, timeout } => {
                    let since_ms = host.now_ms();
                    let queued = Queued {
                        stream: self.id,
                        call,
                        timeout,
                    };
                    let in_flight = match worker.queue_call(queued, host) {
                        Ok(()) => Some(InFlight::Queued { since_ms }),
                        Err(Queued { call, timeout, .. }) => host
                            .dispatch(&worker.config.lease_store, &Callout::Call { call, timeout })
                            .map(|token| InFlight::Dispatched { token, since_ms }),
                    };
                    match in_flight {
                        Some(in_flight) => {
                            self.call = Some(in_flight);
                            None
                        }
                        None => Some(Event::StoreAnswered {
                            answer: Answer::NotSent,
                            elapsed_ms: 0,
                        }),
                    }
                }
                Action::AskService(question) => {
                    let token = question
                        .reconcile
                        .token_env
                        .as_deref()
                        .and_then(|name| host.environment(name));
                    match host.ask_service(&question, token.as_deref()) {
                        Some(token) => {
                            worker.asked(token, self.id);
                            self.call = Some(InFlight::Asked { token });
                            None
                        }
                        None => Some(Event::ServiceAnswered {
                            answer: Answer::NotSent,
                        }),
                    }
                }
                Action::Reply(reply) => {
                    host.send_reply(&reply);
                    None
                }
                Action::StartRenewal(lease) => {
                    worker.start_renewal(lease, host.now_ms());
                    None
                }
                Action::StopRenewal { claim_id } => {
                    worker.stop_renewal(claim_id);
                    None
                }
                Action::LeaseLost { claim_id } => {
                    worker.lease_lost(claim_id, host);
                    None
                }
                Action::HandOff(handoff) => {
                    worker.hand_off(handoff, host);
                    None
                }
                Action::Count(metric) => {
                    host.count(metric);
                    None
                }
                Action::Log { level, message } => {
                    host.log(level, &message);
                    None
                }
                Action::WarnRepeating { kind, message } => {
                    if let Some(suppressed) = worker.admit_warning(kind, host.now_ms()) {
                        host.log(LogLevel::Warn, &log::with_suppressed(&message, suppressed));
                    }
                    None
                }
            };
            if let Some(event) = follow_up {
                for action in machine.on(event).into_iter().rev() {
                    queue.push_front(action);
                }
            }
        }
        verdict
    }
}

impl Driver for Stream {
    /// Only the answer to this stream's call in flight is read; any other
    /// token is not ours.
    fn on_call_answer(&mut self, answered: CalloutAnswered, host: &mut impl Host) {
        match self.call {
            Some(InFlight::Dispatched { token, since_ms }) if token == answered.token => {
                self.call = None;
                let answer = read_answer(host, answered);
                let elapsed_ms = host.now_ms().saturating_sub(since_ms);
                self.drive(Event::StoreAnswered { answer, elapsed_ms }, false, host);
            }
            Some(InFlight::Asked { token }) if token == answered.token => {
                self.call = None;
                if let Some((_, worker)) = &self.run {
                    worker.question_answered(token);
                }
                let answer = read_answer(host, answered);
                self.drive(Event::ServiceAnswered { answer }, false, host);
            }
            _ => {}
        }
    }

    /// The stream ended (`on_log` or `on_done`, whichever comes first; the
    /// second changes nothing). A stream is finished at once: a claim it
    /// could not settle is the outbox's now.
    fn on_done(&mut self, host: &mut impl Host) -> bool {
        self.drive(Event::StreamDone, false, host);
        true
    }
}

/// The response head the machine asked for with `ReadResponseHeaders`: one read of the
/// header map, the status with it, and the properties that tell who produced the response
/// (`docs/envoy-facts.md#who-produced-a-response`).
fn response_head(host: &mut impl Host, end_of_stream: bool) -> Event {
    let headers = host.headers(HeaderMap::Response);
    let status = headers
        .iter()
        .find(|(name, _)| name == ":status")
        .and_then(|(_, value)| parse_status(value))
        .unwrap_or(502);
    Event::ResponseHeadersRead {
        status,
        headers,
        origin: status_matrix::read_origin(|path| host.property(path)),
        end_of_stream,
    }
}
