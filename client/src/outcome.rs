//! Exit codes: what a script needs to decide its next step.
//!
//! | code | outcome | answers | what to do |
//! |---:|---|---|---|
//! | 0 | `success` | 2xx (a replay too) | done |
//! | 1 | `failed` | anything else: 3xx, 404, 405, 500, 501, other 4xx/5xx | look at the report |
//! | 2 | `invalid_input` | 400, 411, 413, 414, 415, 431; a bad flag, header, key or data file (nothing sent) | fix the request |
//! | 3 | `not_authorized` | 401, 403 | fix the credentials or the principal |
//! | 4 | `conflict` | 409, 412, 422 | the key belongs to another request (or needs an operator); do not retry as is |
//! | 5 | `unavailable` | 429, 502, 503, 504 after the retries; connection refused (nothing sent) | retry later with the same key |
//! | 6 | `unknown` | no answer after the request was sent (timeout, reset) | it may have run: retry with the same key |
//!
//! Clap's own usage errors also exit with 2, which keeps "the command line is
//! wrong" on one code.

/// How a `send` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Success,
    /// An answer no other outcome covers.
    Failed,
    /// The request is malformed; nothing will change that but fixing it.
    InvalidInput,
    /// Authentication or authorization refused the request.
    NotAuthorized,
    /// The key is taken by another request, or its record needs an operator.
    Conflict,
    /// The service or a dependency is unavailable; the same key may be retried later.
    Unavailable,
    /// The request was sent but no answer came back: it may have run.
    Unknown,
}

impl Outcome {
    /// The outcome of an HTTP answer.
    pub fn of_status(status: u16) -> Outcome {
        match status {
            200..=299 => Outcome::Success,
            400 | 411 | 413 | 414 | 415 | 431 => Outcome::InvalidInput,
            401 | 403 => Outcome::NotAuthorized,
            409 | 412 | 422 => Outcome::Conflict,
            429 | 502..=504 => Outcome::Unavailable,
            _ => Outcome::Failed,
        }
    }

    /// The process exit code.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Failed => 1,
            Outcome::InvalidInput => 2,
            Outcome::NotAuthorized => 3,
            Outcome::Conflict => 4,
            Outcome::Unavailable => 5,
            Outcome::Unknown => 6,
        }
    }

    /// The spelling in the report's `outcome` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failed => "failed",
            Outcome::InvalidInput => "invalid_input",
            Outcome::NotAuthorized => "not_authorized",
            Outcome::Conflict => "conflict",
            Outcome::Unavailable => "unavailable",
            Outcome::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_exit_codes() {
        let cases = [
            (200, 0),
            (201, 0),
            (204, 0),
            (299, 0),
            (301, 1),
            (304, 1),
            (404, 1),
            (405, 1),
            (500, 1),
            (501, 1),
            (400, 2),
            (411, 2),
            (413, 2),
            (414, 2),
            (415, 2),
            (431, 2),
            (401, 3),
            (403, 3),
            (409, 4),
            (412, 4),
            (422, 4),
            (429, 5),
            (502, 5),
            (503, 5),
            (504, 5),
        ];
        for (status, code) in cases {
            assert_eq!(
                Outcome::of_status(status).exit_code(),
                code,
                "HTTP {status}"
            );
        }
        assert_eq!(Outcome::Unknown.exit_code(), 6);
    }

    #[test]
    fn every_outcome_has_its_own_code_and_name() {
        let all = [
            Outcome::Success,
            Outcome::Failed,
            Outcome::InvalidInput,
            Outcome::NotAuthorized,
            Outcome::Conflict,
            Outcome::Unavailable,
            Outcome::Unknown,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.exit_code(), b.exit_code());
                assert_ne!(a.as_str(), b.as_str());
            }
        }
    }
}
