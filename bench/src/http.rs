//! A lean HTTP/1.1 client: one keep-alive connection per load worker, straight on hyper.
//!
//! Why not `reqwest` (which the tests use)? A closed-loop driver needs exactly one
//! connection per worker, so "concurrency 16" means 16 requests in flight on 16 connections
//! and nothing else: reqwest's pool decides that on its own. And every microsecond the client
//! spends per request is taken from the two cores the proxy under test also runs on, which
//! compresses the ratio between a fast baseline and a slower candidate towards 1. hyper's
//! connection-level API is the part of reqwest that does the work, without the pool, redirect
//! policy and URL re-parsing per request.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HOST, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpSocket, TcpStream};

use crate::error::BenchError;

/// Where requests go: `http://host:port/path?query`, split once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port`, also sent as the `host` header.
    pub authority: String,
    /// Path and query of every request.
    pub path: String,
}

impl Target {
    /// Parses a plain-HTTP URL (TLS is not measured: loopback only).
    pub fn parse(url: &str) -> Result<Target, BenchError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| BenchError::Input(format!("URL {url:?}: {e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(BenchError::Input(format!(
                "URL {url:?}: only http:// is supported"
            )));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| BenchError::Input(format!("URL {url:?} has no host")))?;
        let authority = match authority.port_u16() {
            Some(_) => authority.to_string(),
            None => format!("{}:80", authority.host()),
        };
        let path = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), ToString::to_string);
        Ok(Target { authority, path })
    }

    /// The same host with another path.
    pub fn with_path(&self, path: &str) -> Target {
        Target {
            authority: self.authority.clone(),
            path: path.to_owned(),
        }
    }
}

/// A whole answer: status, headers and body.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

/// One open HTTP/1.1 keep-alive connection.
pub struct Connection {
    authority: String,
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    /// Connects to `authority` (`host:port`).
    pub async fn open(authority: &str) -> Result<Connection, BenchError> {
        let stream = TcpStream::connect(authority)
            .await
            .map_err(|e| http_error(authority, format!("connect: {e}")))?;
        Connection::over(authority, stream).await
    }

    /// Connects to `authority` (an `ip:port`) from the local address `local`: another
    /// caller, to a lease-store that tells callers apart by peer address.
    pub async fn open_from(authority: &str, local: IpAddr) -> Result<Connection, BenchError> {
        Connection::over(authority, connect_from(authority, local).await?).await
    }

    async fn over(authority: &str, stream: TcpStream) -> Result<Connection, BenchError> {
        stream
            .set_nodelay(true)
            .map_err(|e| http_error(authority, format!("set TCP_NODELAY: {e}")))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http_error(authority, format!("handshake: {e}")))?;
        // The connection task ends when the sender is dropped or the peer closes.
        tokio::spawn(connection);
        Ok(Connection {
            authority: authority.to_owned(),
            sender,
        })
    }

    /// Sends one request on this connection and reads the whole answer.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
    ) -> Result<Answer, BenchError> {
        let http_error = |detail: String| BenchError::Http {
            target: self.authority.clone(),
            detail,
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.authority.as_str());
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| http_error(format!("build request: {e}")))?;
        self.sender
            .ready()
            .await
            .map_err(|e| http_error(format!("connection closed: {e}")))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| http_error(format!("send: {e}")))?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| http_error(format!("read body: {e}")))?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// A TCP connection to `authority` (an `ip:port`) from the local address `local`.
pub async fn connect_from(authority: &str, local: IpAddr) -> Result<TcpStream, BenchError> {
    let peer: SocketAddr = authority
        .parse()
        .map_err(|e| http_error(authority, format!("not an ip:port: {e}")))?;
    let socket = match peer {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .and_then(|socket| socket.bind(SocketAddr::new(local, 0)).map(|()| socket))
    .map_err(|e| http_error(authority, format!("bind {local}: {e}")))?;
    socket
        .connect(peer)
        .await
        .map_err(|e| http_error(authority, format!("connect from {local}: {e}")))
}

fn http_error(target: &str, detail: String) -> BenchError {
    BenchError::Http {
        target: target.to_owned(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_splits_into_authority_and_path() {
        let target = Target::parse("http://127.0.0.1:10000/payments?hold=a").expect("parses");
        assert_eq!(target.authority, "127.0.0.1:10000");
        assert_eq!(target.path, "/payments?hold=a");
        assert_eq!(
            Target::parse("http://example.test")
                .expect("parses")
                .authority,
            "example.test:80"
        );
        assert!(Target::parse("https://127.0.0.1/").is_err());
    }
}
