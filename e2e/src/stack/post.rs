//! A request through the stack's Envoy, built by [`Stack::post`].

use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use super::Stack;
use crate::reply::Reply;

/// A request being built by [`Stack::post`].
pub struct Post<'a> {
    pub(super) stack: &'a Stack,
    pub(super) host: IpAddr,
    pub(super) listener: u16,
    pub(super) path: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
    pub(super) timeout: Option<Duration>,
}

impl Post<'_> {
    /// Gives up on the answer after `timeout`: a caller that times out and hangs up.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Adds an `Idempotency-Key` header (call twice to send it twice).
    pub fn key(self, key: &str) -> Self {
        self.header("idempotency-key", key)
    }

    /// Adds a header (repeats allowed; see [`Post::content_type`] and [`Post::user`] to
    /// replace the defaults).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sends the request as principal `user` instead of [`DEFAULT_USER`].
    pub fn user(mut self, user: &str) -> Self {
        self.headers.retain(|(name, _)| name != "x-user");
        self.header("x-user", user)
    }

    /// Replaces the default `content-type: application/json`.
    pub fn content_type(mut self, content_type: &str) -> Self {
        self.headers.retain(|(name, _)| name != "content-type");
        self.header("content-type", content_type)
    }

    /// Sends the request with no principal header at all.
    pub fn anonymous(mut self) -> Self {
        self.headers.retain(|(name, _)| name != "x-user");
        self
    }

    /// Sends a JSON body.
    pub fn json(mut self, body: &Value) -> Self {
        self.body = body.to_string().into_bytes();
        self
    }

    /// Sends raw body bytes.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sends the request and reads the whole answer.
    pub async fn send(self) -> Reply {
        let url = format!("http://{}:{}{}", self.host, self.listener, self.path);
        self.try_send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e:?}"))
    }

    /// Sends the request; an error when no complete answer came back (e.g. Envoy died).
    pub async fn try_send(self) -> Result<Reply, reqwest::Error> {
        let url = format!("http://{}:{}{}", self.host, self.listener, self.path);
        let mut request = self.stack.client.post(&url).body(self.body);
        if let Some(timeout) = self.timeout {
            request = request.timeout(timeout);
        }
        for (name, value) in &self.headers {
            let value = reqwest::header::HeaderValue::from_bytes(value.as_bytes())
                .unwrap_or_else(|e| panic!("header {name}: {value:?} cannot be sent: {e}"));
            request = request.header(name.as_str(), value);
        }
        let response = request.send().await?;
        Reply::try_read(response).await
    }
}
