//! A proxy: the real stream machine (`keyflight_filter::machine::Machine`) for each
//! of its HTTP streams and the real record outbox (`keyflight_filter::outbox::Outbox`)
//! of its worker, driven the way `filter/src/drive/` drives them, with the model as
//! the host.
//!
//! The checker needs states it can hash and share between threads; the machine
//! holds its configuration in an `Rc`, so a stream is kept as the events it was fed
//! (the machine is a pure function of them) and rebuilt to take the next one. The
//! outbox is kept as itself, hashed by its `Debug` form.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::time::Duration;

use keyflight_filter::config::{Config, parse_plugin_config};
use keyflight_filter::identity;
use keyflight_filter::machine::{Action, Event, FENCE_HEADER, Machine};
use keyflight_filter::outbox::{Handoff, Lease, Outbox};
use keyflight_filter::status_matrix::ResponseOrigin;
use keyflight_filter::store_call::{Answer, StoreCall};
use keyflight_protocol::Digest;
use keyflight_protocol::time::millis;
use uuid::Uuid;

use crate::{FilterParams, Uncertain};

/// The answer body of execution `n`: what tells answers apart. Execution 0 is none: the
/// body a run refused by the service's floor answers with.
pub fn body_of(n: u16) -> Vec<u8> {
    if n == 0 {
        return b"fenced".to_vec();
    }
    format!("e{n}").into_bytes()
}

/// The execution an answer body names.
pub fn execution_of(body: &[u8]) -> Option<u16> {
    std::str::from_utf8(body)
        .ok()?
        .strip_prefix('e')?
        .parse()
        .ok()
}

thread_local! {
    static CONFIGS: RefCell<Vec<(FilterParams, Rc<Config>)>> = const { RefCell::new(Vec::new()) };
}

/// The plugin configuration of `f`, parsed and validated by the filter itself;
/// `timeout_override_ms` (a mutation) is applied after validation, which would refuse it.
pub fn config(f: &FilterParams) -> Rc<Config> {
    CONFIGS.with(|cache| {
        if let Some((_, config)) = cache.borrow().iter().find(|(p, _)| p == f) {
            return Rc::clone(config);
        }
        let mut policy = serde_json::json!({
            "name": "payments",
            "match": {"path_prefix": "/pay"},
            "lease_ms": f.lease_ms,
            "renew_interval_ms": f.renew_ms,
            "follower_wait_ms": 0,
            "retention_s": f.retention_s,
            "record_retry_budget_ms": f.budget_ms,
            "uncertain": match f.uncertain {
                Uncertain::Hold => "hold",
                Uncertain::Retry => "retry",
                Uncertain::Record => "record",
                Uncertain::Reconcile => "reconcile",
            },
            "record": if f.after_reply { "after_reply" } else { "before_reply" },
        });
        if f.uncertain == Uncertain::Reconcile {
            policy["reconcile"] = serde_json::json!({
                "cluster": "payments",
                "timeout_ms": f.reconcile_timeout_ms,
            });
        }
        let doc = serde_json::json!({
            "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": f.timeout_ms},
            "edge_cache": {"max_bytes": 0},
            "identity": {"principal": [{"header": "x-user"}]},
            "policies": [policy]
        });
        let mut config = match parse_plugin_config(doc.to_string().as_bytes()) {
            Ok(config) => config,
            Err(e) => panic!("the model's plugin configuration is invalid: {e}"),
        };
        if let Some(ms) = f.timeout_override_ms {
            config.lease_store.timeout = Duration::from_millis(ms);
        }
        let config = Rc::new(config);
        cache.borrow_mut().push((f.clone(), Rc::clone(&config)));
        config
    })
}

/// The store call timeout the worker's root context uses for outbox calls.
pub fn store_timeout_ms(f: &FilterParams) -> u64 {
    millis(config(f).lease_store.timeout)
}

/// An event fed to a stream's machine, in a form the checker can hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Fed {
    /// `on_http_request_headers` for operation `op`.
    Headers(u8),
    /// The last request body chunk.
    BodyChunk(u8),
    /// The body read.
    BodyComplete(u8),
    /// The store call answered (`None`: no answer — a timeout, a reset), this many ms
    /// after it was sent.
    Answer(Option<u16>, Vec<u8>, u64),
    /// The service answered the reconcile question (`None`: no answer).
    ServiceAnswer(Option<u16>, Vec<u8>),
    /// `on_http_response_headers`.
    ResponseHeaders,
    /// The response head read: the upstream's 201, or 503 from a run the floor refused.
    ResponseHead(u16),
    /// The last response body chunk of execution `n`.
    ResponseChunk(u16),
    /// Its body read.
    ResponseBody(u16),
    /// The stream ended.
    Done,
}

fn header(name: &str, value: &str) -> (String, Vec<u8>) {
    (name.to_owned(), value.as_bytes().to_vec())
}

/// Every operation's request head: one key (operations differ by body, so by fingerprint).
fn request() -> Vec<(String, Vec<u8>)> {
    vec![
        header(":method", "POST"),
        header(":path", "/pay"),
        header(":authority", "api.example.com"),
        header("content-type", "application/json"),
        header("idempotency-key", "order-1"),
        header("x-user", "alice"),
    ]
}

fn request_body(op: u8) -> Vec<u8> {
    format!("{{\"op\":{op}}}").into_bytes()
}

impl Fed {
    fn event(&self, config: &Config) -> Event {
        match self {
            Fed::Headers(_) => {
                let headers = request();
                let principal = identity::resolve(&config.identity, &headers, |_| None);
                Event::RequestHeaders {
                    headers,
                    principal,
                    previous_principal: None,
                    end_of_stream: false,
                }
            }
            Fed::BodyChunk(op) => Event::RequestBodyChunk {
                buffered_bytes: request_body(*op).len(),
                end_of_stream: true,
            },
            Fed::BodyComplete(op) => Event::RequestBodyComplete {
                body: request_body(*op),
            },
            Fed::Answer(status, body, elapsed_ms) => Event::StoreAnswered {
                answer: Answer::Received {
                    status: *status,
                    body: body.clone(),
                    framed: false,
                },
                elapsed_ms: *elapsed_ms,
            },
            Fed::ServiceAnswer(status, body) => Event::ServiceAnswered {
                answer: Answer::Received {
                    status: *status,
                    body: body.clone(),
                    framed: false,
                },
            },
            Fed::ResponseHeaders => Event::ResponseHeaders {
                end_of_stream: false,
            },
            Fed::ResponseHead(status) => Event::ResponseHeadersRead {
                status: *status,
                headers: vec![
                    header(":status", &status.to_string()),
                    header("content-type", "text/plain"),
                ],
                origin: ResponseOrigin::Upstream,
                end_of_stream: false,
            },
            Fed::ResponseChunk(n) => Event::ResponseBodyChunk {
                buffered_bytes: body_of(*n).len(),
                end_of_stream: true,
            },
            Fed::ResponseBody(n) => Event::ResponseBodyComplete { body: body_of(*n) },
            Fed::Done => Event::StreamDone,
        }
    }
}

/// What a stream asked of its host, for the world to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Dispatch a store call.
    Call(StoreCall, u64),
    /// Ask the service about run `fence` of operation `scope`, with this timeout (ms).
    Ask(Digest, u16, u64),
    /// The request goes upstream with this fence (`Idempotency-Fence`).
    Forward(Option<u16>),
    /// A local reply (a replay or a problem).
    Reply(u16, Vec<u8>),
    /// The held upstream response goes out.
    ResumeResponse,
    /// Outbox: renew this lease.
    StartRenewal(Lease),
    /// Outbox: stop renewing.
    StopRenewal(Uuid),
    /// Outbox: a settle call found the lease lost.
    LeaseLost(Uuid),
    /// Outbox: take this claim over.
    HandOff(Handoff),
}

/// One HTTP stream of a proxy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stream {
    /// The client.
    pub client: u8,
    /// The client's attempt number.
    pub attempt: u8,
    /// The operation.
    pub op: u8,
    /// Everything fed to its machine, in order.
    pub fed: Vec<Fed>,
    /// The upstream run in progress: (execution, started at ms).
    pub upstream: Option<(u16, u64)>,
    /// The execution this stream forwarded, once it did.
    pub execution: Option<u16>,
    /// The fence the machine put on the forwarded request.
    pub fence: Option<u16>,
    /// The service's floor refused its run: the upstream answers 503.
    pub fenced: bool,
}

impl Stream {
    /// A new stream of `client`'s attempt `attempt` for `op`.
    pub fn new(client: u8, attempt: u8, op: u8) -> Self {
        Stream {
            client,
            attempt,
            op,
            fed: Vec::new(),
            upstream: None,
            execution: None,
            fence: None,
            fenced: false,
        }
    }

    /// Feeds `fed` to the machine (rebuilt from what it was fed before) and runs
    /// what it asks the way `drive/stream.rs` does: a read's follow-up event runs
    /// before the rest.
    pub fn feed(&mut self, f: &FilterParams, fed: Fed) -> Vec<Effect> {
        let config = config(f);
        let mut machine = Machine::new(Rc::clone(&config));
        for past in &self.fed {
            machine.on(past.event(&config));
        }
        let mut effects = Vec::new();
        let mut queue: std::collections::VecDeque<Action> = self.push(&mut machine, &config, fed);
        while let Some(action) = queue.pop_front() {
            let follow_up = match action {
                Action::ReadRequestBody { .. } => Some(Fed::BodyComplete(self.op)),
                Action::ReadResponseHeaders { .. } => {
                    Some(Fed::ResponseHead(if self.fenced { 503 } else { 201 }))
                }
                Action::ReadResponseBody { .. } => self
                    .upstream
                    .map(|(n, _)| if self.fenced { 0 } else { n })
                    .map(Fed::ResponseBody),
                Action::CallStore { call, timeout } => {
                    effects.push(Effect::Call(call, millis(timeout)));
                    None
                }
                Action::AskService(question) => {
                    let fence = u16::try_from(question.fence).unwrap_or(u16::MAX);
                    let timeout = millis(question.reconcile.timeout);
                    effects.push(Effect::Ask(question.scope, fence, timeout));
                    None
                }
                Action::SetRequestHeader { name, value } if name == FENCE_HEADER => {
                    self.fence = value.and_then(|v| v.parse().ok());
                    None
                }
                Action::ResumeRequest | Action::ContinueRequest if self.execution.is_none() => {
                    effects.push(Effect::Forward(self.fence));
                    None
                }
                Action::Reply(reply) => {
                    effects.push(Effect::Reply(reply.status, reply.body));
                    None
                }
                Action::ResumeResponse => {
                    effects.push(Effect::ResumeResponse);
                    None
                }
                Action::StartRenewal(lease) => {
                    effects.push(Effect::StartRenewal(lease));
                    None
                }
                Action::StopRenewal { claim_id } => {
                    effects.push(Effect::StopRenewal(claim_id));
                    None
                }
                Action::LeaseLost { claim_id } => {
                    effects.push(Effect::LeaseLost(claim_id));
                    None
                }
                Action::HandOff(handoff) => {
                    effects.push(Effect::HandOff(handoff));
                    None
                }
                _ => None,
            };
            if let Some(next) = follow_up {
                for action in self.push(&mut machine, &config, next).into_iter().rev() {
                    queue.push_front(action);
                }
            }
        }
        effects
    }

    fn push(
        &mut self,
        machine: &mut Machine,
        config: &Config,
        fed: Fed,
    ) -> std::collections::VecDeque<Action> {
        let actions = machine.on(fed.event(config));
        self.fed.push(fed);
        actions.into()
    }
}

/// The worker's record outbox, hashed and compared by its `Debug` form (all of its
/// state, and no configuration).
#[derive(Debug, Clone)]
pub struct Outboxed(pub Outbox);

struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> fmt::Write for HashWriter<'_, H> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

impl Hash for Outboxed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Writing to a hasher cannot fail.
        let _ = write!(HashWriter(state), "{:?}", self.0);
    }
}

impl PartialEq for Outboxed {
    fn eq(&self, other: &Self) -> bool {
        format!("{:?}", self.0) == format!("{:?}", other.0)
    }
}

impl Eq for Outboxed {}

/// One proxy (one worker: its streams and its outbox).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Proxy {
    /// The record outbox.
    pub outbox: Outboxed,
    /// Its streams, by (client, attempt).
    pub streams: Vec<Stream>,
}

impl Proxy {
    /// A proxy that just started: nothing in its outbox.
    pub fn starting() -> Self {
        Proxy {
            outbox: Outboxed(Outbox::new(16 << 20)),
            streams: Vec::new(),
        }
    }
}
