//! When to send the same request again, and after how long.
//!
//! Only an answer that says "later" is retried: 503 (the lease-store is
//! unreachable, the winner is still running, a failure is cooling down) and
//! 429, and only when it carries `Retry-After` — without one the server did
//! not say the condition is temporary. The retry reuses the key, so at most
//! one of the attempts runs. A `Retry-After` longer than the cap ends the
//! retries instead of being shortened: asking again before the server said
//! so only earns another 503.

use std::time::{Duration, SystemTime};

/// How persistent a `send` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The longest `Retry-After` the command waits for.
    pub max_wait: Duration,
}

/// What to do after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait this long, then send again with the same key.
    Retry(Duration),
    /// Report this answer.
    Stop,
}

/// Parses `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date,
/// relative to `now`. A date in the past means "now"; anything else is `None`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Beyond u64 seconds is "never" in practice: saturate.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Decides after an answer with `status` and parsed `retry_after`, when
/// `retries_done` retries have been sent already.
pub fn next(
    status: u16,
    retry_after: Option<Duration>,
    retries_done: u32,
    policy: &RetryPolicy,
) -> Next {
    let later = matches!(status, 429 | 503);
    match retry_after {
        Some(wait) if later && retries_done < policy.max_retries && wait <= policy.max_wait => {
            Next::Retry(wait)
        }
        _ => Next::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_retries: 2,
        max_wait: Duration::from_secs(30),
    };

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = at(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        for bad in ["", "-1", "1.5", "soon", "1s", "Sun, 06 Nov 1994"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn only_a_503_or_429_with_retry_after_is_retried_within_the_budget() {
        let one = Some(Duration::from_secs(1));
        assert_eq!(
            next(503, one, 0, &POLICY),
            Next::Retry(Duration::from_secs(1))
        );
        assert_eq!(
            next(429, one, 1, &POLICY),
            Next::Retry(Duration::from_secs(1))
        );
        assert_eq!(next(503, one, 2, &POLICY), Next::Stop, "budget spent");
        assert_eq!(next(503, None, 0, &POLICY), Next::Stop, "no Retry-After");
        for status in [200, 201, 400, 409, 500, 502, 504] {
            assert_eq!(next(status, one, 0, &POLICY), Next::Stop, "{status}");
        }
    }

    #[test]
    fn a_retry_after_beyond_the_cap_ends_the_retries() {
        assert_eq!(
            next(503, Some(Duration::from_secs(30)), 0, &POLICY),
            Next::Retry(Duration::from_secs(30))
        );
        assert_eq!(
            next(503, Some(Duration::from_secs(31)), 0, &POLICY),
            Next::Stop
        );
    }
}
