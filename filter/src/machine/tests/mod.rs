//! The stream machine, driven the way production drives it: through the
//! stream driver, over a fake host (`crate::testing`), with the worker's real
//! record outbox. One scenario family per file.
//!
//! Each step returns what the host was asked to do, in the machine's words
//! ([`Action`]); a callback's answer is appended as its `Continue…`/`Pause…`
//! action, so a step reads like the adapter's view of it.

mod body_memo;
mod callbacks;
mod claim;
mod claim_answers;
mod draft_semantics;
mod dry_run;
mod edge_cache;
mod recipe_transition;
mod reconcile;
mod record_after_reply;
mod refusals;
mod response;
mod robustness;
mod settle;
mod spelling;
mod unguarded;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimResponse, WonHow};
use uuid::Uuid;

use super::Action;
use crate::config::{Config, parse_plugin_config};
use crate::drive::host::{CalloutAnswered, Driver};
use crate::drive::stream::{Callback, Stream, Verdict};
use crate::drive::worker::Worker;
use crate::metrics::Metric;
use crate::outbox::{Held, Outbox};
use crate::problem::LocalReply;
use crate::status_matrix::ResponseOrigin;
use crate::store_call::{CallError, StoreCall};
use crate::testing::{FakeHost, counts};

const KEY: &str = "order-42";

/// The host's clock when a test starts.
const NOW_MS: u64 = 1_000_000;

/// The operator epoch the edge-cache tests' worker has heard.
const EPOCH: u64 = 5;

/// The claim id of [`won`].
const CLAIM: Uuid = Uuid::from_u128(7);

/// A config with `root` and policy fields overridden. The edge cache is off
/// unless `root` configures it: most tests are about the store's answers, and
/// the edge-cache tests turn it on.
fn config_with(root: serde_json::Value, policy: serde_json::Value) -> Rc<Config> {
    let mut doc = serde_json::json!({
        "lease_store": {"cluster": "ls", "token": "t", "timeout_ms": 1000},
        "edge_cache": {"max_bytes": 0},
        "identity": {"actor": [{"header": "x-actor"}], "principal": [{"header": "x-user"}]},
        "policies": [{"name": "payments", "match": {"path_prefix": "/payments"}}]
    });
    for (k, v) in root.as_object().unwrap() {
        doc[k] = v.clone();
    }
    for (k, v) in policy.as_object().unwrap() {
        doc["policies"][0][k] = v.clone();
    }
    Rc::new(parse_plugin_config(doc.to_string().as_bytes()).unwrap())
}

fn config() -> Rc<Config> {
    config_with(serde_json::json!({}), serde_json::json!({}))
}

/// [`config_with`] with the edge cache on.
fn cached(root: serde_json::Value, policy: serde_json::Value) -> Rc<Config> {
    let mut root = root;
    root["edge_cache"] =
        serde_json::json!({"max_bytes": 65536, "max_entry_bytes": 4096, "ttl_s": 60});
    config_with(root, policy)
}

fn h(name: &str, value: &str) -> (String, Vec<u8>) {
    (name.to_owned(), value.as_bytes().to_vec())
}

fn request(method: &str, path: &str, extra: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let mut headers = vec![
        h(":method", method),
        h(":path", path),
        h(":authority", "api.example.com"),
        h("content-type", "application/json"),
    ];
    headers.extend(extra.iter().map(|(n, v)| h(n, v)));
    headers
}

/// A keyed POST from alice.
fn keyed() -> Vec<(String, Vec<u8>)> {
    request(
        "POST",
        "/payments",
        &[("idempotency-key", KEY), ("x-user", "alice")],
    )
}

fn won(fence: i64) -> ClaimResponse {
    ClaimResponse::Won {
        claim_id: CLAIM,
        fence,
        how: WonHow::Claimed,
        lease_ms: 30_000,
    }
}

/// One stream of a worker, its host and the worker's outbox.
struct Harness {
    stream: Stream,
    host: FakeHost,
    worker: Rc<Worker>,
}

impl Harness {
    /// A stream of a fresh worker that heard operator epoch [`EPOCH`] just now.
    fn new(config: Rc<Config>) -> Self {
        Self::hearing(config, EPOCH)
    }

    /// A stream of a fresh worker that heard operator epoch `epoch` just now.
    fn hearing(config: Rc<Config>, epoch: u64) -> Self {
        let outbox = Rc::new(RefCell::new(Outbox::new(config.outbox.max_bytes)));
        let worker = Rc::new(Worker::new(config, outbox));
        worker.hear_epoch(epoch, NOW_MS);
        Harness {
            stream: Stream::new(Rc::clone(&worker), 7),
            host: FakeHost {
                now_ms: NOW_MS,
                ..FakeHost::default()
            },
            worker,
        }
    }

    /// Another stream of the same worker, with a host that shares this one's
    /// shared data (the edge cache).
    fn next_stream(&self) -> Harness {
        Harness {
            stream: Stream::new(Rc::clone(&self.worker), 7),
            host: FakeHost {
                now_ms: self.host.now_ms,
                shared: self.host.shared.clone(),
                ..FakeHost::default()
            },
            worker: Rc::clone(&self.worker),
        }
    }

    fn request(&mut self, callback: Callback) -> Vec<Action> {
        let verdict = self.stream.on_callback(callback, &mut self.host);
        let mut out = self.host.take();
        out.push(match verdict {
            Verdict::Continue => Action::ContinueRequest,
            Verdict::Pause => Action::PauseRequest,
        });
        out
    }

    fn response(&mut self, callback: Callback) -> Vec<Action> {
        let verdict = self.stream.on_callback(callback, &mut self.host);
        let mut out = self.host.take();
        out.push(match verdict {
            Verdict::Continue => Action::ContinueResponse,
            Verdict::Pause => Action::PauseResponse,
        });
        out
    }

    /// `on_http_request_headers` with `headers`.
    fn headers(&mut self, headers: Vec<(String, Vec<u8>)>, end_of_stream: bool) -> Vec<Action> {
        self.host.request_headers = headers;
        self.request(Callback::RequestHeaders { end_of_stream })
    }

    /// `on_http_request_body` with `buffered_bytes` buffered so far.
    fn chunk(&mut self, buffered_bytes: usize, end_of_stream: bool) -> Vec<Action> {
        self.request(Callback::RequestBody {
            buffered_bytes,
            end_of_stream,
        })
    }

    /// The whole request body in its last `on_http_request_body`.
    fn body(&mut self, body: &[u8]) -> Vec<Action> {
        self.host.request_body = body.to_vec();
        self.chunk(body.len(), true)
    }

    /// `on_http_response_headers` from the upstream.
    fn respond(&mut self, status: u16, end_of_stream: bool) -> Vec<Action> {
        self.respond_from(status, ResponseOrigin::Upstream, end_of_stream)
    }

    /// `on_http_response_headers` for a response of `origin`.
    fn respond_from(
        &mut self,
        status: u16,
        origin: ResponseOrigin,
        end_of_stream: bool,
    ) -> Vec<Action> {
        self.respond_with(status, origin, &[], end_of_stream)
    }

    /// `on_http_response_headers` for a response of `origin` that also carries `extra`.
    fn respond_with(
        &mut self,
        status: u16,
        origin: ResponseOrigin,
        extra: &[(&str, &str)],
        end_of_stream: bool,
    ) -> Vec<Action> {
        self.host.response_headers = vec![
            h(":status", &status.to_string()),
            h("content-type", "application/json"),
            h("set-cookie", "session=secret"),
            h("content-length", "12"),
            h("etag", "\"v1\""),
        ];
        self.host
            .response_headers
            .extend(extra.iter().map(|(n, v)| h(n, v)));
        let (details, flags): (&[u8], u64) = match origin {
            ResponseOrigin::Upstream => (b"via_upstream", 0),
            ResponseOrigin::Proxy => (b"response_timeout", 0),
            // `UH`: no healthy upstream.
            ResponseOrigin::ProxyNotSent => (b"no_healthy_upstream", 1 << 1),
        };
        let path = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        self.host
            .properties
            .insert(path(&["response", "code_details"]), details.to_vec());
        self.host
            .properties
            .insert(path(&["response", "flags"]), flags.to_le_bytes().to_vec());
        self.response(Callback::ResponseHeaders { end_of_stream })
    }

    /// `on_http_response_body` with `buffered_bytes` buffered so far.
    fn response_chunk(&mut self, buffered_bytes: usize, end_of_stream: bool) -> Vec<Action> {
        self.response(Callback::ResponseBody {
            buffered_bytes,
            end_of_stream,
        })
    }

    /// The whole response body in its last `on_http_response_body`.
    fn response_body(&mut self, body: &[u8]) -> Vec<Action> {
        self.host.response_body = body.to_vec();
        self.response_chunk(body.len(), true)
    }

    /// The host delivers an answer to callout `token`.
    fn answer_token(&mut self, token: u32, status: Option<u16>, body: &[u8]) -> Vec<Action> {
        self.host.call_headers = status
            .map(|s| vec![h(":status", &s.to_string())])
            .unwrap_or_default();
        self.host.call_body = body.to_vec();
        let answered = CalloutAnswered {
            token,
            num_headers: self.host.call_headers.len(),
            body_size: body.len(),
        };
        self.stream.on_call_answer(answered, &mut self.host);
        self.host.take()
    }

    /// The store call in flight answers.
    fn answer(&mut self, status: Option<u16>, body: &[u8]) -> Vec<Action> {
        let token = self.host.last_token().expect("a call in flight");
        self.answer_token(token, status, body)
    }

    /// The claim in flight answers `response`.
    fn claim_answer(&mut self, response: &ClaimResponse) -> Vec<Action> {
        self.answer(Some(200), &serde_json::to_vec(response).unwrap())
    }

    /// The claim in flight is answered with a replay of `response`, whose
    /// record has `expires_in_ms` of its retention left (`None`: a store that
    /// does not say).
    fn replay_answer(
        &mut self,
        response: keyflight_protocol::wire::StoredResponse,
        expires_in_ms: Option<u64>,
    ) -> Vec<Action> {
        let mut answer = serde_json::to_value(ClaimResponse::Completed { response }).unwrap();
        if let Some(ms) = expires_in_ms {
            answer["record_expires_in_ms"] = ms.into();
        }
        self.answer(Some(200), answer.to_string().as_bytes())
    }

    /// The finalize or release in flight is acknowledged.
    fn ack(&mut self) -> Vec<Action> {
        self.answer(Some(200), b"{}")
    }

    /// The call in flight fails with `error`, as the store or the host says it.
    fn fail(&mut self, error: CallError) -> Vec<Action> {
        match error {
            CallError::NoAnswer => self.answer(None, b""),
            CallError::Status(status) => self.answer(Some(status), b""),
            CallError::LeaseLost => self.answer(
                Some(409),
                br#"{"type":"t","title":"t","status":409,"detail":"d","code":"lease_lost"}"#,
            ),
            CallError::Malformed => self.answer(Some(200), b"not json"),
            CallError::Dispatch | CallError::MalformedRecord => {
                panic!("{error:?} is not an answer the store sends")
            }
        }
    }

    /// The stream ends (`on_log` / `on_done`).
    fn done(&mut self) -> Vec<Action> {
        self.stream.on_done(&mut self.host);
        self.host.take()
    }

    /// Drives a keyed POST with `body` up to the claim call (past an
    /// edge-cache miss, when the cache is on); returns it.
    fn drive_to_claim(&mut self, body: &[u8]) -> StoreCall {
        let out = self.headers(keyed(), false);
        assert_eq!(out, vec![Action::PauseRequest]);
        let mut out = self.body(body);
        out.retain(|a| !matches!(a, Action::ReadEdgeCache { .. }));
        match out.as_slice() {
            [
                Action::ReadRequestBody { size },
                Action::CallStore { call, .. },
                Action::PauseRequest,
            ] if *size == body.len() => call.clone(),
            other => panic!("expected the body read and one claim call, got {other:?}"),
        }
    }

    /// What the worker's outbox holds for [`CLAIM`].
    fn held(&self) -> Option<Held> {
        self.worker.outbox().held(CLAIM)
    }
}

/// A stream whose request went upstream with a won lease (fence 3).
fn to_upstream(config: Rc<Config>) -> Harness {
    let mut s = Harness::new(config);
    s.drive_to_claim(br#"{"amount": 10}"#);
    let out = s.claim_answer(&won(3));
    assert!(out.contains(&Action::ResumeRequest), "{out:?}");
    s
}

fn reply(out: &[Action]) -> &LocalReply {
    out.iter()
        .find_map(|a| match a {
            Action::Reply(r) => Some(r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply in {out:?}"))
}

fn code(reply: &LocalReply) -> String {
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    body["code"].as_str().unwrap().to_owned()
}

fn header<'a>(reply: &'a LocalReply, name: &str) -> Option<&'a str> {
    reply
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn calls(out: &[Action]) -> Vec<&StoreCall> {
    out.iter()
        .filter_map(|a| match a {
            Action::CallStore { call, .. } => Some(call),
            _ => None,
        })
        .collect()
}

/// The one store call among `out`.
fn single_call(out: &[Action]) -> StoreCall {
    match calls(out).as_slice() {
        [call] => (*call).clone(),
        other => panic!("expected one store call, got {other:?}"),
    }
}

/// `out` without its log lines (the evidence lines have their own tests).
fn without_logs(out: Vec<Action>) -> Vec<Action> {
    out.into_iter()
        .filter(|a| !matches!(a, Action::Log { .. }))
        .collect()
}

/// The scope and fingerprint a keyed POST with `body` claims under `config`
/// (the edge cache missed).
fn claim_of(config: Rc<Config>, body: &[u8]) -> (Digest, Digest) {
    let mut s = Harness::new(config);
    s.headers(keyed(), false);
    match calls(&s.body(body)).as_slice() {
        [StoreCall::Claim { scope, request }] => (*scope, request.fingerprint),
        other => panic!("expected a claim, got {other:?}"),
    }
}
