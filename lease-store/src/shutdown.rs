//! Graceful shutdown: SIGTERM or SIGINT → stop accepting, drain, exit 0.
//!
//! One [`Shutdown`] is created by `serve`. Its [`watch`] channel is the single
//! "we are stopping" signal every long-lived part listens to: the HTTP server
//! stops accepting connections and waits for in-flight requests, long-polling
//! claims stop waiting and answer `in_progress` at once (so the drain takes
//! milliseconds, not a full `wait_ms`), the `LISTEN` connection and retention
//! clean-up stop. A waiting follower then retries against another replica.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// The process-wide stop signal.
#[derive(Debug)]
pub struct Shutdown {
    sender: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Shutdown {
            sender: watch::Sender::new(false),
        }
    }

    /// A receiver that sees `true` once shutdown begins.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.sender.subscribe()
    }

    /// Begins shutdown: every subscriber sees `true`.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// Waits for SIGTERM or SIGINT, then triggers shutdown.
    ///
    /// If the signal handlers cannot be installed, shutdown begins at once:
    /// a server that could never be stopped cleanly must not start serving.
    pub async fn on_signal(&self) {
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                tracing::info!(signal = name, "shutting down: draining in-flight requests");
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "cannot install signal handlers; shutting down");
            }
        }
        self.trigger();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_see_the_trigger() {
        let shutdown = Shutdown::new();
        let mut rx = shutdown.subscribe();
        assert!(!*rx.borrow());
        shutdown.trigger();
        rx.changed().await.expect("sender alive");
        assert!(*rx.borrow());
    }
}
