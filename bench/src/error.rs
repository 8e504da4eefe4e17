//! The one error type of the benchmark: whatever stops a measurement from being taken.
//!
//! The benchmark is a command-line tool, so every error ends the run with its message; the
//! variants say which part failed so the message points at the right log.

use std::io;

/// Why a benchmark step failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A URL, header or option given on the command line is not usable.
    #[error("invalid input: {0}")]
    Input(String),
    /// Connecting to or talking with an HTTP endpoint failed.
    #[error("HTTP {target}: {detail}")]
    Http {
        /// The endpoint (`host:port`).
        target: String,
        /// What went wrong.
        detail: String,
    },
    /// An endpoint answered something other than what the scenario expects.
    #[error("unexpected answer: {0}")]
    Answer(String),
    /// `pgbench` could not run or its output could not be read.
    #[error("pgbench: {0}")]
    Pgbench(String),
    /// A file or process could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl BenchError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
        let context = context.into();
        move |source| BenchError::Io { context, source }
    }
}
