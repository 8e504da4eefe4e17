//! A handle on the TCP connection a request arrived on, so a handler can drop it.
//!
//! `?abort=NAME` simulates a payment service that dies after its side effect: the handler
//! counts the execution, then shuts the connection down without an answer. The proxy in
//! front sees the upstream close the connection after it sent the whole request, which is
//! what a route's `retry_on: reset` (or `5xx`) retries. A handler has no socket of its own,
//! so each connection's socket is duplicated when it is accepted; shutting the duplicate
//! down ends the connection for hyper too.

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;

/// The accepted connection (`None` when its socket could not be duplicated; such a
/// connection is never aborted and the request is answered normally).
#[derive(Debug, Clone)]
pub struct Connection(Option<Arc<TcpStream>>);

impl Connected<IncomingStream<'_, TcpListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        let socket = stream.io().as_fd().try_clone_to_owned().ok();
        Connection(socket.map(|fd| Arc::new(TcpStream::from(fd))))
    }
}

impl Connection {
    /// Closes both directions of the connection; returns whether it could.
    pub fn abort(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|socket| socket.shutdown(Shutdown::Both).is_ok())
    }
}
