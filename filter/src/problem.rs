//! F10: the filter's local error replies as RFC 9457 problem details
//! (`docs/stream-machine.md#local-replies`).
//!
//! The status of each code comes from the one table in
//! [`keyflight_protocol::problem`], under the configured status profile and
//! the policy's own statuses (`Policy::status_of`), and every 503 gets its
//! `Retry-After` by the protocol's one rule, here rather than at each call
//! site.

use keyflight_protocol::ProblemCode;
use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem, retry_after_s};

/// A response the filter sends itself (an error or a replay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalReply {
    /// HTTP status.
    pub status: u16,
    /// Response headers, lowercase names.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: Vec<u8>,
}

/// Builds the problem+json reply for `code` with `status`.
///
/// `retry_after_s` becomes a `Retry-After` header (at least 1 s); every 503
/// carries one.
pub fn problem_reply(
    code: ProblemCode,
    status: u16,
    detail: &str,
    retry_after: Option<u64>,
) -> LocalReply {
    let problem = Problem::new(code, status, detail);
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut headers = vec![("content-type".to_owned(), PROBLEM_CONTENT_TYPE.to_owned())];
    if let Some(s) = retry_after_s(status, retry_after) {
        headers.push(("retry-after".to_owned(), s.to_string()));
    }
    LocalReply {
        status,
        headers,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keyflight_protocol::problem::StatusProfile;

    fn header<'a>(reply: &'a LocalReply, name: &str) -> Option<&'a str> {
        reply
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn profiles_differ_only_for_in_flight_and_mismatch() {
        use ProblemCode::*;
        let table = [
            (IdempotencyKeyRequired, 400, 400),
            (IdempotencyKeyInvalid, 400, 400),
            (PrincipalRequired, 401, 401),
            (PayloadTooLarge, 413, 413),
            (JournalUnavailable, 503, 503),
            (IdempotencyConflict, 409, 422),
            (RequestInProgress, 503, 409),
            (RetryableCooldown, 503, 503),
            (ResponseNotReplayable, 409, 409),
            (OperationUnknown, 409, 409),
        ];
        for (code, keyflight, ietf) in table {
            assert_eq!(
                code.status_under(StatusProfile::Keyflight),
                keyflight,
                "{code:?}"
            );
            assert_eq!(code.status_under(StatusProfile::Ietf), ietf, "{code:?}");
        }
    }

    #[test]
    fn body_is_problem_json_with_code() {
        let reply = problem_reply(
            ProblemCode::IdempotencyConflict,
            ProblemCode::IdempotencyConflict.status_under(StatusProfile::Keyflight),
            "different request",
            None,
        );
        assert_eq!(reply.status, 409);
        assert_eq!(header(&reply, "content-type"), Some(PROBLEM_CONTENT_TYPE));
        assert_eq!(header(&reply, "retry-after"), None);
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["code"], "idempotency_conflict");
        assert_eq!(body["status"], 409);
        assert_eq!(body["detail"], "different request");
        assert_eq!(
            body["type"],
            "https://keyflight.dev/problems/idempotency_conflict"
        );
        assert!(body["title"].is_string());
    }

    #[test]
    fn every_503_has_retry_after() {
        let reply = problem_reply(
            ProblemCode::JournalUnavailable,
            ProblemCode::JournalUnavailable.status_under(StatusProfile::Keyflight),
            "x",
            None,
        );
        assert_eq!(header(&reply, "retry-after"), Some("1"));
        let reply = problem_reply(
            ProblemCode::RetryableCooldown,
            ProblemCode::RetryableCooldown.status_under(StatusProfile::Keyflight),
            "x",
            Some(0),
        );
        assert_eq!(header(&reply, "retry-after"), Some("1"));
        let reply = problem_reply(
            ProblemCode::RequestInProgress,
            ProblemCode::RequestInProgress.status_under(StatusProfile::Ietf),
            "x",
            Some(7),
        );
        assert_eq!(reply.status, 409);
        assert_eq!(header(&reply, "retry-after"), Some("7"));
    }
}
