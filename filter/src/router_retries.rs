//! F15: Envoy's router never runs a guarded request twice.
//!
//! A route `retry_policy` (or a caller's `x-envoy-retry-on` header, which
//! Envoy honours from clients it treats as internal) makes the router resend
//! the request upstream inside one stream: after the claim, under the same
//! fence, where this filter sees only the last attempt's answer. Checked on
//! Envoy 1.40 with an upstream that reads the request and then closes the
//! connection without answering, or answers 5xx:
//!
//! | `retry_on` | resends a request the upstream already received when it |
//! |---|---|
//! | `5xx` | resets, closes, times out per try, or answers any 5xx |
//! | `gateway-error` | resets, closes, times out per try, or answers 502/503/504 |
//! | `reset` | resets, closes or times out per try |
//! | `retriable-status-codes`, `retriable-4xx`, `retriable-headers` | answers a listed status (409 for `retriable-4xx`) or header |
//! | `cancelled`, `deadline-exceeded`, `internal`, `resource-exhausted`, `unavailable` | answers that gRPC status |
//! | `connect-failure`, `refused-stream`, `reset-before-request` | never: they fire only when no request reached the upstream (no connection, HTTP/2 `REFUSED_STREAM`, a reset before the request was sent) |
//!
//! Istio's default for every route it builds from a VirtualService (gateway
//! and sidecar outbound) is `connect-failure,refused-stream,unavailable,
//! cancelled,retriable-status-codes` with status 503 and two retries: an
//! upstream's own 503 or gRPC `UNAVAILABLE` runs it again.
//!
//! So by default ([`RouterRetries::Off`]) the filter sets
//! `x-envoy-max-retries: 0` on every guarded request it forwards: the header
//! overrides the number of retries of any policy, route or caller-sent, and a
//! header set by a filter before the router is honoured (checked on 1.40).
//! [`RouterRetries::Route`] keeps the route's policy for routes limited to the
//! safe conditions, and drops the headers through which a caller or an
//! earlier filter could widen it.

use crate::config::RouterRetries;

/// The router header that overrides a retry policy's number of retries.
pub const MAX_RETRIES_HEADER: &str = "x-envoy-max-retries";

/// Request headers that add retry conditions to the route's policy, or make
/// the router send a second attempt while the first still runs (hedging).
pub const WIDENING_HEADERS: [&str; 3] = [
    "x-envoy-retry-on",
    "x-envoy-retry-grpc-on",
    "x-envoy-hedge-on-per-try-timeout",
];

/// The request header edits for a guarded request about to be forwarded:
/// `(name, Some(value))` sets a header, `(name, None)` removes it.
pub fn header_edits(mode: RouterRetries) -> Vec<(&'static str, Option<&'static str>)> {
    match mode {
        RouterRetries::Off => vec![(MAX_RETRIES_HEADER, Some("0"))],
        RouterRetries::Route => WIDENING_HEADERS.iter().map(|name| (*name, None)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_caps_every_retry_policy_at_zero_retries() {
        assert_eq!(
            header_edits(RouterRetries::Off),
            vec![("x-envoy-max-retries", Some("0"))]
        );
    }

    #[test]
    fn route_keeps_the_route_policy_but_drops_what_would_widen_it() {
        let edits = header_edits(RouterRetries::Route);
        assert_eq!(edits.len(), 3);
        for (name, value) in edits {
            assert!(WIDENING_HEADERS.contains(&name), "{name}");
            assert_eq!(value, None, "{name} is removed, not set");
        }
    }
}
