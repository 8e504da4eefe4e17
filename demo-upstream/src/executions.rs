//! The execution log: one entry per payment handler entered, in order, with what a history
//! checker needs to tell one operation's runs apart.
//!
//! A count (`GET /stats`) says *that* something ran twice; a fault-injection run needs to
//! say *which* key ran twice, under which fence, through which proxy and for which caller's
//! request, to decide whether the second run is the documented at-least-once case or a bug.
//! So every execution is logged the moment its handler starts (the same moment it is
//! counted), with:
//!
//! - the `idempotency-key` and `idempotency-fence` headers as the upstream saw them (the
//!   filter forwards the caller's key and adds the fence of its claim);
//! - the path (query excluded) and the SHA-256 of the raw request body;
//! - `x-keyflight-via` (which proxy forwarded it: the chaos harness's Envoy configs add it
//!   with `request_headers_to_add`) and `x-caller-request-id` (the caller's own id for the
//!   attempt), when present.
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
    /// `sha256:<hex>` of the raw request body.
    pub body_sha256: String,
    /// The [`VIA_HEADER`], when present.
    pub via: Option<String>,
    /// The [`CALLER_REQUEST_HEADER`], when present.
    pub caller_request_id: Option<String>,
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
            body_sha256: format!("sha256:{}", hex::encode(Sha256::digest(body))),
            via: text(VIA_HEADER),
            caller_request_id: text(CALLER_REQUEST_HEADER),
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
    fn an_execution_records_key_fence_body_digest_and_origin() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_static("k-1"));
        headers.insert("idempotency-fence", HeaderValue::from_static("42"));
        headers.insert(VIA_HEADER, HeaderValue::from_static("envoy-1"));
        headers.insert(CALLER_REQUEST_HEADER, HeaderValue::from_static("r-7"));
        let entry = Execution::of_request(3, "/payments", &headers, b"abc");
        assert_eq!(entry.execution, 3);
        assert_eq!(entry.key.as_deref(), Some("k-1"));
        assert_eq!(entry.fence.as_deref(), Some("42"));
        assert_eq!(entry.via.as_deref(), Some("envoy-1"));
        assert_eq!(entry.caller_request_id.as_deref(), Some("r-7"));
        assert_eq!(
            entry.body_sha256,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(entry.at_unix_ms > 0);
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
