//! The listener: accepts connections under a cap and serves each over HTTP/1.1 with a
//! header-read timeout (`docs/configuration.md#limits`).
//!
//! `axum::serve` runs hyper without a timer, so no header-read timeout applies and a client
//! that opens a connection and sends half a request head holds it forever. This loop runs
//! hyper's HTTP/1 connection builder itself, with tokio's timer, so hyper closes a
//! connection whose request head is not complete within the timeout (hyper runs that timer
//! whenever it waits for a head, so it also ends a keep-alive connection idle that long).
//!
//! A connection whose reader takes none of an answer for `write_timeout` is closed (and
//! counted): until then the answer's grant (its budget, its concurrency slot) stays held
//! (`crate::api::held`), so a reader that stopped reading would hold it for good. The
//! timeout runs between two writes that make progress, as nginx's `send_timeout` does: a
//! reader that takes a little at a time is bounded by the answer budget, not cut off.
//!
//! Past `max_connections` a connection is closed as soon as it is accepted (and counted)
//! rather than left in the kernel's backlog: a proxy sees the close at once and can try
//! another replica, where a queued connection would only wait behind the stalled ones that
//! filled the cap.
//!
//! Shutdown: when `stop` turns `true` the listener closes and every connection finishes
//! the request it is serving, then closes (hyper's graceful shutdown); `serve` bounds that
//! drain.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::Sleep;
use tower::ServiceExt as _;

use crate::metrics::{Metrics, Shed};

/// Pause after an accept error that is not about one connection (e.g. out of file
/// descriptors), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// How connections are admitted and read.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Time for a connection to send a complete request head.
    pub header_read_timeout: Duration,
    /// Time a connection's reader may take none of an answer.
    pub write_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `stop` turns `true`, then lets every open connection
/// finish its request.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // An error means the sender is gone, so no one could stop us later: stop now.
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            metrics.shed(Shed::Connections);
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        // The peer address is who the body budget charges (`crate::api::budget`).
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        ));
        let stream = WriteTimeout::new(stream, limits.write_timeout, metrics.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A connection whose writes fail once none made progress for `limit`.
struct WriteTimeout<S> {
    inner: S,
    limit: Duration,
    /// Runs while a write waits for the reader; reset by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
    metrics: Metrics,
}

impl<S> WriteTimeout<S> {
    fn new(inner: S, limit: Duration, metrics: Metrics) -> Self {
        WriteTimeout {
            inner,
            limit,
            stalled: None,
            metrics,
        }
    }

    /// `polled`, or a timeout error once writes have waited `limit` without progress.
    fn watched<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if stalled.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.stalled = None;
        self.metrics.shed(Shed::WriteTimeout);
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the peer read none of the answer within --write-timeout",
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watched(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watched(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watched(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
