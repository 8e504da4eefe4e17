//! The execution log: one entry per payment handler entered, in order, with what a history
//! checker needs to tell one operation's runs apart.
//!
//! A count (`GET /stats`) says *that* something ran twice; a fault-injection run needs to
//! say *which* key ran twice, under which fence, through which proxy and for which caller's
//! request, to decide whether the second run is the documented at-least-once case or a bug.
//! So every execution is logged the moment its handler starts (the same moment it is
//! counted), with:
//!
//! - the `idempotency-key`, `idempotency-fence` and `idempotency-scope` headers as the
//!   upstream saw them (the filter forwards the caller's key and adds the fence and scope of
//!   its claim);
//! - the path (query excluded) and the SHA-256 of the raw request body;
//! - `x-keyflight-via` (which proxy forwarded it: the chaos harness's Envoy configs add it
//!   with `request_headers_to_add`) and `x-caller-request-id` (the caller's own id for the
//!   attempt), when present.
//!
//! When the handler is done, its entry also says what it did: the status it answered
//! (`answered`), or that it dropped the connection without an answer (`reset`, from
//! `?abort=`). A history checker needs this to tell which row of the guarantee table a
//! re-run falls under (a forgotten status, a retryable failure, an uncertain outcome):
//! what the caller got may be a replay or a proxy's answer, what the upstream answered is
//! only known here.
//!
//! The log lives in memory and is served as JSON lines by `GET /executions` (`?after=N`
//! returns only entries with `execution > N`, so a reader can follow it). It grows with
//! every payment: it is meant for demo and test runs, which last minutes, not for a
//! long-running service.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use keyflight_protocol::time::millis;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The header naming the proxy that forwarded a request (added by the proxy's config).
pub const VIA_HEADER: &str = "x-keyflight-via";

/// The header carrying the caller's own id for one attempt.
pub const CALLER_REQUEST_HEADER: &str = "x-caller-request-id";

/// One payment handler entered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Execution {
    /// The execution number (1-based, the same number `/stats` counts and the answer's
    /// `execution` field carries).
    pub execution: u64,
    /// When the handler started, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The request path, query excluded.
    pub path: String,
    /// The `idempotency-key` header, when present.
    pub key: Option<String>,
    /// The `idempotency-fence` header, when present (kept as text: it is the proxy's).
    pub fence: Option<String>,
    /// The `idempotency-scope` header, when present.
    pub scope: Option<String>,
    /// `sha256:<hex>` of the raw request body.
    pub body_sha256: String,
    /// The [`VIA_HEADER`], when present.
    pub via: Option<String>,
    /// The [`CALLER_REQUEST_HEADER`], when present.
    pub caller_request_id: Option<String>,
    /// The status the handler answered; `None` while it runs, or when it answered nothing.
    pub answered: Option<u16>,
    /// The handler dropped the connection without an answer (`?abort=`).
    pub reset: bool,
}

impl Execution {
    /// The log entry for execution number `execution` of a request with these parts.
    pub fn of_request(execution: u64, path: &str, headers: &HeaderMap, body: &[u8]) -> Self {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        Execution {
            execution,
            at_unix_ms: unix_ms(),
            path: path.to_owned(),
            key: text("idempotency-key"),
            fence: text("idempotency-fence"),
            scope: text("idempotency-scope"),
            body_sha256: format!("sha256:{}", hex::encode(Sha256::digest(body))),
            via: text(VIA_HEADER),
            caller_request_id: text(CALLER_REQUEST_HEADER),
            answered: None,
            reset: false,
        }
    }
}

/// The log, shared by all handlers.
#[derive(Debug, Default)]
pub struct ExecutionLog {
    entries: Mutex<Vec<Execution>>,
}

impl ExecutionLog {
    /// Appends one execution.
    pub fn push(&self, execution: Execution) {
        self.lock().push(execution);
    }

    /// Notes that execution `execution` answered `status`.
    pub fn answered(&self, execution: u64, status: u16) {
        self.update(execution, |entry| entry.answered = Some(status));
    }

    /// Notes that execution `execution` dropped its connection without an answer.
    pub fn reset(&self, execution: u64) {
        self.update(execution, |entry| entry.reset = true);
    }

    fn update(&self, execution: u64, change: impl FnOnce(&mut Execution)) {
        // The newest entries are the ones still running.
        if let Some(entry) = self
            .lock()
            .iter_mut()
            .rev()
            .find(|entry| entry.execution == execution)
        {
            change(entry);
        }
    }

    /// The entries with an execution number above `after`, as JSON lines.
    pub fn json_lines_after(&self, after: u64) -> String {
        self.lock()
            .iter()
            .filter(|entry| entry.execution > after)
            .filter_map(|entry| serde_json::to_string(entry).ok())
            .map(|line| line + "\n")
            .collect()
    }

    /// Empties the log.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Execution>> {
        // Each push is one append: a poisoned lock holds no half-written entry.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn an_execution_records_key_fence_scope_body_digest_and_origin() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_static("k-1"));
        headers.insert("idempotency-fence", HeaderValue::from_static("42"));
        headers.insert("idempotency-scope", HeaderValue::from_static("5c09e"));
        headers.insert(VIA_HEADER, HeaderValue::from_static("envoy-1"));
        headers.insert(CALLER_REQUEST_HEADER, HeaderValue::from_static("r-7"));
        let entry = Execution::of_request(3, "/payments", &headers, b"abc");
        assert_eq!(entry.execution, 3);
        assert_eq!(entry.key.as_deref(), Some("k-1"));
        assert_eq!(entry.fence.as_deref(), Some("42"));
        assert_eq!(entry.scope.as_deref(), Some("5c09e"));
        assert_eq!(entry.via.as_deref(), Some("envoy-1"));
        assert_eq!(entry.caller_request_id.as_deref(), Some("r-7"));
        assert_eq!(
            entry.body_sha256,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(entry.at_unix_ms > 0);
        assert_eq!((entry.answered, entry.reset), (None, false));
    }

    #[test]
    fn an_entry_says_what_its_handler_answered() {
        let log = ExecutionLog::default();
        for n in 1..=2 {
            log.push(Execution::of_request(
                n,
                "/payments",
                &HeaderMap::new(),
                b"",
            ));
        }
        log.answered(1, 503);
        log.reset(2);
        let lines: Vec<serde_json::Value> = log
            .json_lines_after(0)
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        assert_eq!(lines[0]["answered"], 503);
        assert_eq!(lines[0]["reset"], false);
        assert_eq!(lines[1]["answered"], serde_json::Value::Null);
        assert_eq!(lines[1]["reset"], true);
    }

    #[test]
    fn the_log_pages_by_execution_number() {
        let log = ExecutionLog::default();
        for n in 1..=3 {
            log.push(Execution::of_request(
                n,
                "/payments",
                &HeaderMap::new(),
                b"",
            ));
        }
        let numbers: Vec<u64> = log
            .json_lines_after(1)
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                value["execution"].as_u64().expect("an execution number")
            })
            .collect();
        assert_eq!(numbers, [2, 3]);
        log.clear();
        assert_eq!(log.json_lines_after(0), "");
    }
}
