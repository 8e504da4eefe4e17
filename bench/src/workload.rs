//! What one iteration of a load worker does.
//!
//! [`Workload::Request`] is the generic scenario: any HTTP endpoint, given a URL, a method,
//! a header set and a body, so the same workload can be aimed at another idempotency proxy.
//! The text `{unique}` in a header value or the body is replaced, per request, by a value no
//! other request of the run carries (fresh idempotency keys). [`Workload::StoreCycle`] is P1's
//! lease-store cycle: claim a fresh scope, then finalize it, two dependent calls.
//! [`Workload::RedisPair`] is the same two steps on a durable Redis ([`crate::redis`]).

use bytes::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::{ClaimRequest, ClaimResponse, FinalizeRequest, StoredResponse};

use crate::error::BenchError;
use crate::http::{Answer, Connection, Target};
use crate::pgbench;
use crate::redis::{RedisPair, RespConnection};

/// The placeholder replaced by a per-request unique value.
pub const UNIQUE: &str = "{unique}";

/// One iteration of a load worker.
#[derive(Debug, Clone)]
pub enum Workload {
    /// One request to any HTTP endpoint.
    Request(RequestTemplate),
    /// Claim + finalize of a fresh scope on the lease-store (P1).
    StoreCycle(StoreCycle),
    /// `SET NX` + `SET` of a fresh key on a durable Redis (the Redis baseline).
    RedisPair(RedisPair),
}

/// A worker's connection: HTTP for the store and the proxies, RESP for Redis.
pub enum Session {
    /// An HTTP/1.1 connection.
    Http(Connection),
    /// A Redis connection.
    Resp(RespConnection),
}

impl Workload {
    /// Opens the connection a worker runs this workload on.
    pub async fn open(&self) -> Result<Session, BenchError> {
        match self {
            Workload::Request(template) => Connection::open(&template.target.authority)
                .await
                .map(Session::Http),
            Workload::StoreCycle(cycle) => Connection::open(&cycle.store).await.map(Session::Http),
            Workload::RedisPair(pair) => RespConnection::open(&pair.authority)
                .await
                .map(Session::Resp),
        }
    }

    /// Runs one iteration on `session`; `unique` is this iteration's unique value.
    pub async fn run_once(&self, session: &mut Session, unique: &str) -> Result<(), BenchError> {
        match (self, session) {
            (Workload::Request(template), Session::Http(connection)) => {
                template.send(connection, unique).await
            }
            (Workload::StoreCycle(cycle), Session::Http(connection)) => {
                cycle.run(connection, unique).await
            }
            (Workload::RedisPair(pair), Session::Resp(connection)) => {
                pair.run(connection, unique).await
            }
            _ => Err(BenchError::Input(
                "a workload ran on another workload's connection".into(),
            )),
        }
    }
}

/// A request to send, with `{unique}` placeholders.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    /// Where it goes.
    pub target: Target,
    /// Its method.
    pub method: Method,
    /// Its headers (values may hold `{unique}`).
    pub headers: Vec<(HeaderName, String)>,
    /// Its body (may hold `{unique}`).
    pub body: String,
    /// The status a successful answer has; anything else counts as an error.
    pub expect_status: StatusCode,
}

impl RequestTemplate {
    /// A payment POST as every guarded scenario sends it: the principal the shipped plugin
    /// reads (`x-user: alice`), a JSON `body`, the idempotency key `key` (`{unique}` is
    /// filled per request), and 201 expected.
    pub fn payment(url: &str, key: &str, body: &str) -> Result<RequestTemplate, BenchError> {
        RequestTemplate::parse(
            url,
            "POST",
            &[
                "x-user: alice".to_owned(),
                "content-type: application/json".to_owned(),
                format!("idempotency-key: {key}"),
            ],
            body,
            201,
        )
    }

    /// A template from command-line strings: `name: value` headers.
    pub fn parse(
        url: &str,
        method: &str,
        headers: &[String],
        body: &str,
        expect_status: u16,
    ) -> Result<RequestTemplate, BenchError> {
        let target = Target::parse(url)?;
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|e| BenchError::Input(format!("method {method:?}: {e}")))?;
        let headers = headers
            .iter()
            .map(|line| {
                let (name, value) = line.split_once(':').ok_or_else(|| {
                    BenchError::Input(format!("header {line:?} is not `name: value`"))
                })?;
                let name = HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|e| BenchError::Input(format!("header name {name:?}: {e}")))?;
                Ok((name, value.trim().to_owned()))
            })
            .collect::<Result<Vec<_>, BenchError>>()?;
        let expect_status = StatusCode::from_u16(expect_status)
            .map_err(|e| BenchError::Input(format!("status {expect_status}: {e}")))?;
        Ok(RequestTemplate {
            target,
            method,
            headers,
            body: body.to_owned(),
            expect_status,
        })
    }

    /// Sends the request with `{unique}` replaced, checking the status.
    pub async fn send(&self, connection: &mut Connection, unique: &str) -> Result<(), BenchError> {
        let answer = self.send_for_answer(connection, unique).await?;
        if answer.status == self.expect_status {
            Ok(())
        } else {
            Err(BenchError::Answer(format!(
                "{} {} answered {} (expected {}): {}",
                self.method,
                self.target.path,
                answer.status,
                self.expect_status,
                String::from_utf8_lossy(&answer.body)
            )))
        }
    }

    /// Sends the request with `{unique}` replaced and returns the whole answer.
    pub async fn send_for_answer(
        &self,
        connection: &mut Connection,
        unique: &str,
    ) -> Result<Answer, BenchError> {
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| {
                let value = fill(value, unique);
                HeaderValue::from_str(&value)
                    .map(|value| (name.clone(), value))
                    .map_err(|e| BenchError::Input(format!("header {name}: {value:?}: {e}")))
            })
            .collect::<Result<Vec<_>, BenchError>>()?;
        let body = Bytes::from(fill(&self.body, unique));
        connection
            .send(self.method.clone(), &self.target.path, &headers, body)
            .await
    }
}

/// `text` with every `{unique}` replaced (no allocation when there is none).
fn fill(text: &str, unique: &str) -> String {
    if text.contains(UNIQUE) {
        text.replace(UNIQUE, unique)
    } else {
        text.to_owned()
    }
}

/// P1's cycle against the lease-store API v1: claim a fresh scope, finalize it.
#[derive(Debug, Clone)]
pub struct StoreCycle {
    /// The lease-store's `host:port`.
    pub store: String,
    /// `Bearer …` for the filter's token.
    pub authorization: HeaderValue,
    /// The lease asked for.
    pub lease_ms: u64,
    /// The response the finalize records (what the filter would send).
    pub response: StoredResponse,
}

impl StoreCycle {
    /// The cycle the suite and `keyflight-bench cycle` run: the demo policy's lease and a
    /// recorded answer of a demo-upstream response's size (the same one pgbench records).
    pub fn new(store: String, filter_token: &str) -> Result<StoreCycle, BenchError> {
        let authorization = HeaderValue::from_str(&format!("Bearer {filter_token}"))
            .map_err(|e| BenchError::Input(format!("the filter token is not a header: {e}")))?;
        Ok(StoreCycle {
            store,
            authorization,
            lease_ms: pgbench::LEASE_MS,
            response: StoredResponse::new(
                201,
                vec![("content-type".into(), "application/json".into())],
                &pgbench::recorded_body(),
            ),
        })
    }

    async fn run(&self, connection: &mut Connection, unique: &str) -> Result<(), BenchError> {
        let scope = Digest::of(unique.as_bytes()).to_hex();
        let claim = ClaimRequest {
            fingerprint: Digest::of(b"keyflight-bench"),
            lease_ms: self.lease_ms,
            wait_ms: None,
            retention_s: None,
            previous: None,
            // The demo's policy, `uncertain: hold` (`envoy/demo.yaml`).
            at_most_once: true,
        };
        let answer = self
            .post(connection, &format!("/v1/claims/{scope}"), &claim)
            .await?;
        let claim_id = match serde_json::from_slice(&answer.body) {
            Ok(ClaimResponse::Won { claim_id, .. }) => claim_id,
            _ => {
                return Err(BenchError::Answer(format!(
                    "claim of a fresh scope answered {}: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                )));
            }
        };
        let finalize = FinalizeRequest {
            claim_id,
            response: self.response.clone(),
            replayable: true,
            previous_scope: None,
        };
        let answer = self
            .post(
                connection,
                &format!("/v1/claims/{scope}/finalize"),
                &finalize,
            )
            .await?;
        if answer.status == StatusCode::OK {
            Ok(())
        } else {
            Err(BenchError::Answer(format!(
                "finalize answered {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            )))
        }
    }

    async fn post(
        &self,
        connection: &mut Connection,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<Answer, BenchError> {
        post_store_call(connection, &self.authorization, path, body).await
    }
}

/// `POST path` to a lease-store with `body` as JSON and the filter token `authorization`.
pub async fn post_store_call(
    connection: &mut Connection,
    authorization: &HeaderValue,
    path: &str,
    body: &impl serde::Serialize,
) -> Result<Answer, BenchError> {
    let body = serde_json::to_vec(body)
        .map_err(|e| BenchError::Input(format!("serialize a store call: {e}")))?;
    let headers = [
        (AUTHORIZATION, authorization.clone()),
        (CONTENT_TYPE, HeaderValue::from_static("application/json")),
    ];
    connection
        .send(Method::POST, path, &headers, Bytes::from(body))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_parses_headers_and_fills_unique_values() {
        let template = RequestTemplate::parse(
            "http://127.0.0.1:1/payments",
            "POST",
            &["x-user: alice".into(), "Idempotency-Key: k-{unique}".into()],
            r#"{"n":"{unique}"}"#,
            201,
        )
        .expect("parses");
        assert_eq!(template.headers[1].0, "idempotency-key");
        assert_eq!(fill(&template.headers[1].1, "7"), "k-7");
        assert_eq!(fill(&template.body, "7"), r#"{"n":"7"}"#);
        assert!(
            RequestTemplate::parse("http://h:1/", "POST", &["nocolon".into()], "", 200).is_err()
        );
    }
}
