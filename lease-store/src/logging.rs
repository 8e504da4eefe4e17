//! Logging set-up, and the caps that keep secrets out of every log level (L7).
//!
//! Logs go to stderr: JSON lines when `KEYFLIGHT_LOG_FORMAT=json`, text
//! otherwise; `RUST_LOG` filters them. The store's own events carry digests,
//! counts and states only. Several dependencies are less careful at their
//! verbose levels: `tokio-postgres` prints every statement's parameters at
//! DEBUG (a finalize's parameters are the recorded body and headers), axum
//! prints why it rejected a body at TRACE (serde's message quotes the input),
//! and the HTTP stacks (hyper, h2, reqwest) trace connection internals. So
//! whatever `RUST_LOG` asks for, the targets in [`CAPS`] never log below the
//! level given there: the caps are a second filter that every event must pass
//! as well as `RUST_LOG`'s, so no directive can lift them. `tower_http`'s
//! request log stays available at DEBUG: it records method, path (a scope
//! digest), status and latency, and the router never asks it for headers.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Dependency targets (prefixes) and the most verbose level they may log at.
pub const CAPS: &[(&str, LevelFilter)] = &[
    // Statement parameters at DEBUG; `postgres` also covers postgres-protocol/-types.
    ("tokio_postgres", LevelFilter::INFO),
    ("postgres", LevelFilter::INFO),
    ("deadpool", LevelFilter::INFO),
    ("refinery", LevelFilter::INFO),
    // Rejection reasons (which quote the rejected input) at TRACE.
    ("axum", LevelFilter::INFO),
    ("hyper", LevelFilter::INFO),
    ("h2", LevelFilter::INFO),
    ("reqwest", LevelFilter::INFO),
    ("tower_http", LevelFilter::DEBUG),
];

/// The caps as a filter: everything else passes to `RUST_LOG`'s filter unchanged.
pub fn caps() -> Targets {
    Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_targets(CAPS.iter().copied())
}

/// Installs the process-wide subscriber: `RUST_LOG` (else `default_level`)
/// and the caps, to stderr, JSON lines when `KEYFLIGHT_LOG_FORMAT=json`.
/// Records of the `log` crate (tokio-postgres logs through it) pass the same
/// filters.
pub fn init(default_level: &str) {
    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let json = std::env::var("KEYFLIGHT_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let ansi = std::io::stderr().is_terminal();
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(env)
        .with(caps())
        .with(text)
        .with(json)
        .init();
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    #[test]
    fn capped_targets_never_pass_debug_or_trace() {
        let caps = caps();
        for target in [
            "tokio_postgres::query",
            "tokio_postgres::prepare",
            "postgres_protocol",
            "axum::rejection",
            "hyper::proto::h1::io",
            "hyper_util::client",
            "h2::codec",
            "reqwest::connect",
            "deadpool_postgres",
        ] {
            assert!(
                !caps.would_enable(target, &Level::DEBUG),
                "{target} at DEBUG"
            );
            assert!(
                !caps.would_enable(target, &Level::TRACE),
                "{target} at TRACE"
            );
            assert!(caps.would_enable(target, &Level::INFO), "{target} at INFO");
        }
        assert!(caps.would_enable("tower_http::trace", &Level::DEBUG));
        assert!(!caps.would_enable("tower_http::trace", &Level::TRACE));
        assert!(caps.would_enable("keyflight_lease_store::api", &Level::TRACE));
    }
}
