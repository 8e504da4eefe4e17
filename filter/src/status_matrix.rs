//! F6: what an upstream answer turns the record into.
//!
//! Deterministic answers are recorded and replayed; the 3xx and 4xx answers a
//! policy's `forget_statuses` names (by default those that depend on revocable
//! context — authz — or send the client elsewhere before anything ran —
//! redirects other than 303) are forgotten; transient failures leave a short
//! cooldown (`docs/stream-machine.md#response-side`), or, under a policy's
//! `server_errors: record`, the upstream's own 5xx is recorded like any other
//! answer. A 5xx or 408 that the proxy generated itself after the
//! request may have reached the upstream (reset, route timeout, stream idle
//! timeout) says nothing about whether the upstream acted, so it is *uncertain*
//! and the policy's `uncertain` setting decides. An answer the proxy generated
//! because the request never left it (no healthy host, connection refused,
//! overflow, no route) is never recorded: a 5xx is a plain retryable failure,
//! anything else (a 404 for no route) is forgotten.
//!
//! [`origin`] reads the two Envoy properties that tell these apart, checked on
//! Envoy 1.40:
//!
//! | response | `response.code_details` | `response.flags` |
//! |---|---|---|
//! | the upstream's own answer (any status) | `via_upstream` | `0` |
//! | route timeout (504) | `response_timeout` | `UT` |
//! | upstream killed mid-request (503) | `upstream_reset_before_response_started{connection_termination}` | `UC` |
//! | upstream not listening (503) | `upstream_reset_before_response_started{remote_connection_failure…}` | `UF` |
//!
//! `response.flags` is Envoy's legacy response-flag bit vector, a `u64` in
//! little-endian byte order (`1 << CoreResponseFlag`).
//!
//! Envoy also sets `URX` (retry limit exceeded) when a route has a retry
//! policy whose condition matched but no retry was left, also when there
//! were none to begin with: with the filter's `x-envoy-max-retries: 0` (F15),
//! a refused connection reports `URX,UF` after one attempt (checked on 1.40).
//! `upstream.request_attempt_count` (a `u64`, same byte order) tells the two
//! apart: with at most one attempt, no earlier attempt can have reached the
//! upstream, and `URX` says nothing.

use std::collections::BTreeSet;

use crate::config::ServerErrors;

/// Who produced the response the filter sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOrigin {
    /// The upstream answered (Envoy `response.code_details` is `via_upstream`).
    Upstream,
    /// Envoy (or a filter after this one) generated it, and the request may
    /// have reached the upstream: reset, timeout, anything not known to be
    /// harmless.
    Proxy,
    /// Envoy generated it because the request never reached an upstream
    /// (no healthy host, connection failure, overflow, no route or cluster).
    ProxyNotSent,
}

/// Envoy response flags (bit = `1 << CoreResponseFlag`) meaning the request
/// was never sent to an upstream host: `UH` no healthy upstream (1), `UF`
/// upstream connection failure (5), `UO` upstream overflow (7), `NR` no route
/// (8), `NC` no cluster (24), `DF` DNS resolution failed (26), `DO`/`UDO`
/// overload drops (27, 29).
const NOT_SENT_FLAGS: u64 =
    1 << 1 | 1 << 5 | 1 << 7 | 1 << 8 | 1 << 24 | 1 << 26 | 1 << 27 | 1 << 29;

/// `URX`: the upstream retry limit was exceeded (15).
const RETRY_LIMIT_EXCEEDED: u64 = 1 << 15;

/// `response.code_details` of a response the upstream sent.
const VIA_UPSTREAM: &[u8] = b"via_upstream";

/// [`origin`], reading each property through `property` (a host call each), the flags and
/// the attempt count only for a response Envoy did not mark as the upstream's: nearly
/// every response is, and needs one read.
pub fn read_origin(mut property: impl FnMut(&[&str]) -> Option<Vec<u8>>) -> ResponseOrigin {
    let code_details = property(&["response", "code_details"]);
    if code_details.as_deref() == Some(VIA_UPSTREAM) {
        return ResponseOrigin::Upstream;
    }
    origin(
        code_details.as_deref(),
        property(&["response", "flags"]).as_deref(),
        property(&["upstream", "request_attempt_count"]).as_deref(),
    )
}

/// Classifies who produced a response from Envoy's `response.code_details`,
/// `response.flags` and `upstream.request_attempt_count` properties (any may
/// be missing).
///
/// Only an exact `via_upstream` is the upstream's own answer. A proxy answer is
/// "not sent" only when flags are present, non-zero and every flag set is a
/// not-sent flag; a retry that was sent once and then failed to connect
/// (`URX` with `UF`, more than one attempt) carries a flag outside the set and
/// stays uncertain.
pub fn origin(
    code_details: Option<&[u8]>,
    flags: Option<&[u8]>,
    attempts: Option<&[u8]>,
) -> ResponseOrigin {
    if code_details == Some(VIA_UPSTREAM) {
        return ResponseOrigin::Upstream;
    }
    let mut bits = flags.and_then(le_u64).unwrap_or(0);
    if attempts.and_then(le_u64).is_some_and(|n| n <= 1) {
        bits &= !RETRY_LIMIT_EXCEEDED;
    }
    if bits != 0 && bits & !NOT_SENT_FLAGS == 0 {
        ResponseOrigin::ProxyNotSent
    } else if code_details.is_none() && bits == 0 {
        // Without either property there is nothing to say the proxy made it.
        ResponseOrigin::Upstream
    } else {
        ResponseOrigin::Proxy
    }
}

/// A property holding a `u64` (8 bytes, little-endian), `None` for any other shape.
fn le_u64(raw: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(raw).ok().map(u64::from_le_bytes)
}

/// What to do with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Finalize as completed (replayable unless over the response cap).
    Record,
    /// Release `forget`: nothing recorded, a retry runs again.
    Forget,
    /// Release `cooldown`: failed; a same-body retry may run after the cooldown.
    Cooldown,
    /// The upstream may or may not have acted: the policy's `uncertain` decides.
    Uncertain,
}

/// The 4xx answers that are failures with a cooldown, never recorded or forgotten.
const COOLDOWN_4XX: [u16; 2] = [408, 429];

/// The 3xx and 4xx answers recorded when a policy names no `forget_statuses`:
/// `303 See Other` is POST-redirect-GET's answer to an operation that
/// completed; 400, 404, 409 and 422 are deterministic refusals the IETF
/// idempotency-key draft expects replayed.
const RECORDED_3XX_4XX: [u16; 5] = [303, 400, 404, 409, 422];

/// Whether a policy may list `status` in `forget_statuses`: a 3xx or a 4xx
/// that is not a cooldown failure. A 2xx is a completed operation and a 5xx a
/// failure; neither is ever forgotten.
pub fn may_be_forgotten(status: u16) -> bool {
    (300..=499).contains(&status) && !COOLDOWN_4XX.contains(&status)
}

/// The default `forget_statuses`: every 3xx and 4xx that may be forgotten
/// except 303, 400, 404, 409 and 422. A 302 or 307 may send the client to a
/// login page, a 301 or 308 to where the resource moved, 401 and 403 depend
/// on revocable authorization, and the other 4xx (405, 412, 413, 423, …) mean
/// the upstream refused without acting, so running the retry again is safe
/// while recording a possibly transient refusal would not be.
pub fn default_forget_statuses() -> BTreeSet<u16> {
    (300..=499)
        .filter(|s| may_be_forgotten(*s) && !RECORDED_3XX_4XX.contains(s))
        .collect()
}

/// Classifies a response (F6) for a policy that forgets `forget` (a set
/// [`may_be_forgotten`] accepts) and treats the upstream's own 5xx as
/// `server_errors` says. 408 and 429 cool down either way: they say the
/// upstream did not act, where a 5xx leaves it open.
pub fn classify(
    status: u16,
    origin: ResponseOrigin,
    forget: &BTreeSet<u16>,
    server_errors: ServerErrors,
) -> Disposition {
    match (status, origin) {
        (408 | 500..=599, ResponseOrigin::Proxy) => Disposition::Uncertain,
        (408 | 429 | 500..=599, ResponseOrigin::ProxyNotSent) => Disposition::Cooldown,
        (_, ResponseOrigin::ProxyNotSent) => Disposition::Forget,
        (500..=599, _) if server_errors == ServerErrors::Record => Disposition::Record,
        (408 | 429 | 500..=599, _) => Disposition::Cooldown,
        (200..=499, _) if !forget.contains(&status) => Disposition::Record,
        _ => Disposition::Forget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_rows() {
        use Disposition::*;
        use ResponseOrigin::*;
        let table = [
            (200, Upstream, Record),
            (201, Upstream, Record),
            (204, Upstream, Record),
            (400, Upstream, Record),
            (404, Upstream, Record),
            (409, Upstream, Record),
            (422, Upstream, Record),
            (401, Upstream, Forget),
            (403, Upstream, Forget),
            (301, Upstream, Forget),
            (302, Upstream, Forget),
            (303, Upstream, Record),
            (304, Upstream, Forget),
            (307, Upstream, Forget),
            (308, Upstream, Forget),
            (303, Proxy, Record),
            (302, Proxy, Forget),
            (405, Upstream, Forget),
            (500, Upstream, Cooldown),
            (502, Upstream, Cooldown),
            (503, Upstream, Cooldown),
            (408, Upstream, Cooldown),
            (429, Upstream, Cooldown),
            (503, Proxy, Uncertain),
            (504, Proxy, Uncertain),
            (403, Proxy, Forget),
            (200, Proxy, Record),
            (408, Proxy, Uncertain),
            (503, ProxyNotSent, Cooldown),
            (502, ProxyNotSent, Cooldown),
            (404, ProxyNotSent, Forget),
        ];
        for (status, origin, want) in table {
            let forget = default_forget_statuses();
            assert_eq!(
                classify(status, origin, &forget, ServerErrors::Cooldown),
                want,
                "{status} {origin:?}"
            );
        }
    }

    #[test]
    fn recording_server_errors_changes_only_the_upstreams_own_5xx() {
        use ResponseOrigin::*;
        let forget = default_forget_statuses();
        for status in 100..=599 {
            for origin in [Upstream, Proxy, ProxyNotSent] {
                let cooled = classify(status, origin, &forget, ServerErrors::Cooldown);
                let recorded = classify(status, origin, &forget, ServerErrors::Record);
                let want = match (status, origin) {
                    (500..=599, Upstream) => Disposition::Record,
                    _ => cooled,
                };
                assert_eq!(recorded, want, "{status} {origin:?}");
            }
        }
    }

    fn flags(bits: u64) -> [u8; 8] {
        bits.to_le_bytes()
    }

    #[test]
    fn an_upstream_answer_is_told_by_one_property_read() {
        let mut read = Vec::new();
        let origin = read_origin(|path| {
            read.push(path.join("."));
            (path == ["response", "code_details"]).then(|| b"via_upstream".to_vec())
        });
        assert_eq!(origin, ResponseOrigin::Upstream);
        assert_eq!(read, ["response.code_details"]);
    }

    #[test]
    fn a_proxy_answer_reads_the_flags_and_the_attempts_too() {
        let mut read = Vec::new();
        let origin = read_origin(|path| {
            read.push(path.join("."));
            match path {
                ["response", "code_details"] => {
                    Some(b"upstream_reset_before_response_started{connection_refused}".to_vec())
                }
                ["response", "flags"] => Some(flags(1 << 5).to_vec()),
                _ => None,
            }
        });
        assert_eq!(origin, ResponseOrigin::ProxyNotSent);
        assert_eq!(
            read,
            [
                "response.code_details",
                "response.flags",
                "upstream.request_attempt_count"
            ]
        );
    }

    #[test]
    fn origins_as_envoy_reports_them() {
        use ResponseOrigin::*;
        let via = Some(b"via_upstream".as_slice());
        assert_eq!(origin(via, Some(&flags(0)), None), Upstream);
        let timeout = Some(b"response_timeout".as_slice());
        assert_eq!(origin(timeout, Some(&flags(1 << 2)), None), Proxy, "UT");
        let reset = b"upstream_reset_before_response_started{connection_termination}";
        assert_eq!(origin(Some(reset), Some(&flags(1 << 6)), None), Proxy, "UC");
        let refused = b"upstream_reset_before_response_started{remote_connection_failure}";
        assert_eq!(
            origin(Some(refused), Some(&flags(1 << 5)), None),
            ProxyNotSent,
            "UF"
        );
        let no_host = Some(b"no_healthy_upstream".as_slice());
        assert_eq!(
            origin(no_host, Some(&flags(1 << 1)), None),
            ProxyNotSent,
            "UH"
        );
        // A retry that ran once and then could not connect stays uncertain.
        assert_eq!(
            origin(
                Some(refused),
                Some(&flags(1 << 5 | 1 << 15)),
                Some(&flags(2))
            ),
            Proxy,
            "UF+URX, two attempts"
        );
        // ... and so does one without an attempt count to say otherwise.
        assert_eq!(
            origin(Some(refused), Some(&flags(1 << 5 | 1 << 15)), None),
            Proxy,
            "UF+URX, attempts unknown"
        );
    }

    #[test]
    fn a_single_attempt_makes_urx_meaningless() {
        use ResponseOrigin::*;
        // With retries capped at zero, a refused connection is URX,UF after one attempt.
        let refused =
            Some(b"upstream_reset_before_response_started{remote_connection_failure}".as_slice());
        let urx_uf = flags(1 << 5 | 1 << 15);
        assert_eq!(
            origin(refused, Some(&urx_uf), Some(&flags(1))),
            ProxyNotSent
        );
        // A reset after the request went out stays uncertain, with or without URX.
        let reset =
            Some(b"upstream_reset_before_response_started{connection_termination}".as_slice());
        let urx_uc = flags(1 << 6 | 1 << 15);
        assert_eq!(origin(reset, Some(&urx_uc), Some(&flags(1))), Proxy);
        // No healthy host: nothing was attempted at all.
        let no_host = Some(b"no_healthy_upstream".as_slice());
        assert_eq!(
            origin(no_host, Some(&flags(1 << 1 | 1 << 15)), Some(&flags(0))),
            ProxyNotSent
        );
        // A malformed count is no count.
        assert_eq!(origin(refused, Some(&urx_uf), Some(&[1])), Proxy);
    }

    #[test]
    fn odd_or_missing_properties_never_claim_not_sent() {
        use ResponseOrigin::*;
        assert_eq!(origin(None, None, None), Upstream);
        let local = Some(b"direct_response".as_slice());
        assert_eq!(origin(local, None, None), Proxy);
        assert_eq!(origin(local, Some(&[1, 2, 3]), None), Proxy, "short flags");
        assert_eq!(origin(None, Some(&flags(1 << 6)), None), Proxy);
        assert_eq!(origin(None, Some(&flags(1 << 5)), None), ProxyNotSent);
    }
}
