//! A fake host for the native tests: it answers the drivers from plain data
//! and records what it was asked, in the machine's own words ([`Action`]).
//!
//! The drivers under test are the ones production runs; only the host is
//! fake, the way quinn-proto's tests drive the real connection code over a
//! simulated network.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::body_memo;
use crate::config::LeaseStore;
use crate::drive::host::{Buffer, HeaderMap, Host, LogLevel};
use crate::edge_cache::{self, Entry};
use crate::machine::Action;
use crate::metrics::{Gauge, Metric};
use crate::problem::LocalReply;
use crate::reconcile::ServiceQuestion;
use crate::store_call::Callout;

/// The host's side of one stream or root context.
#[derive(Debug, Default)]
pub struct FakeHost {
    /// The host's clock.
    pub now_ms: u64,
    /// The request's headers, as `on_http_request_headers` would see them.
    pub request_headers: Vec<(String, Vec<u8>)>,
    /// The buffered request body.
    pub request_body: Vec<u8>,
    /// The response's headers, `:status` included.
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// The buffered response body.
    pub response_body: Vec<u8>,
    /// Envoy properties by path.
    pub properties: BTreeMap<Vec<String>, Vec<u8>>,
    /// The headers of the callout answer being delivered.
    pub call_headers: Vec<(String, Vec<u8>)>,
    /// The body of the callout answer being delivered.
    pub call_body: Vec<u8>,
    /// The plugin configuration `on_configure` reads.
    pub plugin_configuration: Vec<u8>,
    /// The VM's environment variables.
    pub environment: BTreeMap<String, String>,
    /// Shared data (the edge cache's slots).
    pub shared: BTreeMap<String, Vec<u8>>,
    /// Refuse every dispatch (no healthy lease-store host, an unknown cluster).
    pub refuse_dispatch: bool,
    /// What the filter did, in order: every effect, and the reads the
    /// machine asked for (`Read…`). A refused dispatch is recorded too.
    pub did: Vec<Action>,
    /// Times the response head was read.
    pub head_reads: usize,
    /// Gauge changes, in order.
    pub adjusted: Vec<(Gauge, i64)>,
    /// Dispatched callouts with their tokens, in order.
    pub dispatched: Vec<(u32, Callout)>,
    /// The streams each root-context callout was for (`Host::dispatch_for`), by token.
    pub dispatched_for: Vec<(u32, Vec<crate::coalesce::StreamId>)>,
    /// Reconcile questions asked, with their tokens and the bearer token sent.
    pub asked: Vec<(u32, Option<String>)>,
    /// The tick period last set.
    pub tick_period: Option<Duration>,
    /// `done()` was called.
    pub finished: bool,
    /// The last token handed out.
    pub next_token: u32,
    /// The wake-up queue `register_wake_queue` hands out (`None`: refused, so streams
    /// dispatch their own calls).
    pub wake_queue: Option<u32>,
    /// The queues woken, in order.
    pub wakes: Vec<u32>,
    /// Refuse every wake-up.
    pub refuse_wake: bool,
}

impl FakeHost {
    /// What the filter did since the last call.
    pub fn take(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.did)
    }

    /// The token of the last dispatched callout.
    pub fn last_token(&self) -> Option<u32> {
        let callout = self.dispatched.last().map(|(token, _)| *token);
        let question = self.asked.last().map(|(token, _)| *token);
        callout.max(question)
    }

    fn map(&self, map: HeaderMap) -> &[(String, Vec<u8>)] {
        match map {
            HeaderMap::Request => &self.request_headers,
            HeaderMap::Response => &self.response_headers,
            HeaderMap::CallResponse => &self.call_headers,
        }
    }
}

impl Host for FakeHost {
    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn environment(&mut self, name: &str) -> Option<String> {
        self.environment.get(name).cloned()
    }

    fn log(&mut self, level: LogLevel, message: &str) {
        self.did.push(Action::Log {
            level,
            message: message.to_owned(),
        });
    }

    fn count(&mut self, metric: Metric) {
        self.did.push(Action::Count(metric));
    }

    fn adjust(&mut self, gauge: Gauge, delta: i64) {
        self.adjusted.push((gauge, delta));
    }

    fn headers(&mut self, map: HeaderMap) -> Vec<(String, Vec<u8>)> {
        if map == HeaderMap::Response {
            self.head_reads += 1;
        }
        self.map(map).to_vec()
    }

    fn header(&mut self, map: HeaderMap, name: &str) -> Option<Vec<u8>> {
        self.map(map)
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn buffer(&mut self, buffer: Buffer, size: usize) -> Vec<u8> {
        let bytes = match buffer {
            Buffer::RequestBody => {
                self.did.push(Action::ReadRequestBody { size });
                &self.request_body
            }
            Buffer::ResponseBody => {
                self.did.push(Action::ReadResponseBody { size });
                &self.response_body
            }
            Buffer::CallResponseBody => &self.call_body,
            Buffer::PluginConfiguration => &self.plugin_configuration,
        };
        bytes[..size.min(bytes.len())].to_vec()
    }

    fn property(&mut self, path: &[&str]) -> Option<Vec<u8>> {
        let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
        self.properties.get(&path).cloned()
    }

    fn set_request_header(&mut self, name: &str, value: Option<&str>) {
        self.did.push(Action::SetRequestHeader {
            name: name.to_owned(),
            value: value.map(str::to_owned),
        });
    }

    fn resume_request(&mut self) {
        self.did.push(Action::ResumeRequest);
    }

    fn resume_response(&mut self) {
        self.did.push(Action::ResumeResponse);
    }

    fn send_reply(&mut self, reply: &LocalReply) {
        self.did.push(Action::Reply(reply.clone()));
    }

    fn shared_data(&mut self, key: &str) -> Option<Vec<u8>> {
        let key = key.to_owned();
        self.did.push(if key.starts_with(body_memo::KEY_PREFIX) {
            Action::ReadBodyDigest { key: key.clone() }
        } else {
            Action::ReadEdgeCache { key: key.clone() }
        });
        self.shared.get(&key).cloned()
    }

    fn replace_shared_data(&mut self, key: &str, value: &[u8]) {
        if key.starts_with(body_memo::KEY_PREFIX) {
            self.did.push(Action::WriteBodyDigest {
                key: key.to_owned(),
                value: value.to_vec(),
            });
            self.shared.insert(key.to_owned(), value.to_vec());
            return;
        }
        let slot = edge_cache::decode(value).expect("the filter writes whole entries");
        self.did.push(Action::WriteEdgeCache {
            key: key.to_owned(),
            entry: Entry {
                scope: slot.scope,
                fingerprint: slot.fingerprint,
                epoch: slot.epoch,
                expires_at_ms: slot.expires_at_ms,
                response: slot.response,
            },
        });
        self.shared.insert(key.to_owned(), value.to_vec());
    }

    fn dispatch(&mut self, _store: &LeaseStore, callout: &Callout) -> Option<u32> {
        if let Callout::Call { call, timeout } = callout {
            self.did.push(Action::CallStore {
                call: call.clone(),
                timeout: *timeout,
            });
        }
        if self.refuse_dispatch {
            return None;
        }
        self.next_token += 1;
        self.dispatched.push((self.next_token, callout.clone()));
        Some(self.next_token)
    }

    fn dispatch_for(
        &mut self,
        store: &LeaseStore,
        callout: &Callout,
        streams: &[crate::coalesce::StreamId],
    ) -> Option<u32> {
        let token = self.dispatch(store, callout)?;
        self.dispatched_for.push((token, streams.to_vec()));
        Some(token)
    }

    fn ask_service(&mut self, question: &ServiceQuestion, token: Option<&str>) -> Option<u32> {
        self.did.push(Action::AskService(question.clone()));
        if self.refuse_dispatch {
            return None;
        }
        self.next_token += 1;
        self.asked.push((self.next_token, token.map(str::to_owned)));
        Some(self.next_token)
    }

    fn register_wake_queue(&mut self) -> Option<u32> {
        self.wake_queue
    }

    fn wake(&mut self, queue: u32) -> bool {
        self.wakes.push(queue);
        !self.refuse_wake
    }

    fn set_tick_period(&mut self, period: Duration) {
        self.tick_period = Some(period);
    }

    fn done(&mut self) {
        self.finished = true;
    }
}

/// The counters a batch of actions increments, in order.
pub fn counts(out: &[Action]) -> Vec<Metric> {
    out.iter()
        .filter_map(|a| match a {
            Action::Count(m) => Some(*m),
            _ => None,
        })
        .collect()
}
