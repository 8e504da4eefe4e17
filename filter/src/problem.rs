//! F10: the filter's local error replies as RFC 9457 problem details.
//!
//! This is the one place a [`ProblemCode`] becomes an HTTP status, so the two
//! status profiles (keyflight's and the IETF draft's) differ in exactly one
//! function, and every 503 gets its `Retry-After` here rather than at each
//! call site.

use keyflight_protocol::ProblemCode;
use keyflight_protocol::problem::{PROBLEM_CONTENT_TYPE, Problem};

use crate::config::StatusProfile;

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

/// The HTTP status of a problem under a status profile.
pub fn status_for(code: ProblemCode, profile: StatusProfile) -> u16 {
    match (code, profile) {
        (ProblemCode::RequestInProgress, StatusProfile::Ietf) => 409,
        (ProblemCode::IdempotencyConflict, StatusProfile::Ietf) => 422,
        (
            ProblemCode::IdempotencyKeyRequired
            | ProblemCode::IdempotencyKeyInvalid
            | ProblemCode::PrincipalAmbiguous,
            _,
        ) => 400,
        (ProblemCode::PrincipalRequired | ProblemCode::Unauthorized, _) => 401,
        (ProblemCode::Forbidden, _) => 403,
        (ProblemCode::NotFound, _) => 404,
        (ProblemCode::PayloadTooLarge, _) => 413,
        (ProblemCode::MethodNotAllowed, _) => 405,
        (
            ProblemCode::JournalUnavailable
            | ProblemCode::RequestInProgress
            | ProblemCode::RetryableCooldown,
            _,
        ) => 503,
        (
            ProblemCode::IdempotencyConflict
            | ProblemCode::ResponseNotReplayable
            | ProblemCode::OperationUnknown
            | ProblemCode::LeaseLost
            | ProblemCode::NotUnknown,
            _,
        ) => 409,
        (ProblemCode::BadRequest | ProblemCode::ReplayRiskNotAcknowledged, _) => 400,
    }
}

/// Builds the problem+json reply for `code`.
///
/// `retry_after_s` becomes a `Retry-After` header (at least 1 s). Every 503
/// carries one: a 503 without it would invite an immediate retry storm.
pub fn problem_reply(
    code: ProblemCode,
    profile: StatusProfile,
    detail: &str,
    retry_after_s: Option<u64>,
) -> LocalReply {
    let status = status_for(code, profile);
    let problem = Problem::new(code, status, detail);
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut headers = vec![("content-type".to_owned(), PROBLEM_CONTENT_TYPE.to_owned())];
    let retry_after = match retry_after_s {
        Some(s) => Some(s.max(1)),
        None if status == 503 => Some(1),
        None => None,
    };
    if let Some(s) = retry_after {
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
                status_for(code, StatusProfile::Keyflight),
                keyflight,
                "{code:?}"
            );
            assert_eq!(status_for(code, StatusProfile::Ietf), ietf, "{code:?}");
        }
    }

    #[test]
    fn body_is_problem_json_with_code() {
        let reply = problem_reply(
            ProblemCode::IdempotencyConflict,
            StatusProfile::Keyflight,
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
            StatusProfile::Keyflight,
            "x",
            None,
        );
        assert_eq!(header(&reply, "retry-after"), Some("1"));
        let reply = problem_reply(
            ProblemCode::RetryableCooldown,
            StatusProfile::Keyflight,
            "x",
            Some(0),
        );
        assert_eq!(header(&reply, "retry-after"), Some("1"));
        let reply = problem_reply(
            ProblemCode::RequestInProgress,
            StatusProfile::Ietf,
            "x",
            Some(7),
        );
        assert_eq!(reply.status, 409);
        assert_eq!(header(&reply, "retry-after"), Some("7"));
    }
}
