//! What Envoy answered: status, every header (repeats kept) and the whole body.

use serde_json::Value;

/// One HTTP answer, read completely.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Every header in order, lowercase names; repeated headers appear repeatedly.
    pub headers: Vec<(String, String)>,
    /// The body bytes.
    pub body: Vec<u8>,
}

impl Reply {
    /// Reads a reqwest response to the end.
    pub async fn read(response: reqwest::Response) -> Reply {
        Reply::try_read(response)
            .await
            .unwrap_or_else(|e| panic!("read the response body: {e}"))
    }

    /// Reads a reqwest response to the end; an error when the body was cut off.
    pub async fn try_read(response: reqwest::Response) -> Result<Reply, reqwest::Error> {
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response.bytes().await?.to_vec();
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether header `name` is present at all.
    pub fn has_header(&self, name: &str) -> bool {
        self.header(name).is_some()
    }

    /// The body as text (lossy), for messages.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// Asserts the answer is a replay of a recorded one (`idempotent-replayed: true`).
    #[track_caller]
    pub fn assert_replayed(&self) {
        assert_eq!(self.header("idempotent-replayed"), Some("true"), "{self}");
    }

    /// Asserts the answer is problem+json with `status` and `code`, and returns the problem.
    pub fn assert_problem(&self, status: u16, code: &str) -> Value {
        assert_eq!(
            (self.status, self.header("content-type")),
            (status, Some("application/problem+json")),
            "expected a {status} problem+json `{code}`, got: {self}"
        );
        let problem = self.json();
        assert_eq!(problem["code"], code, "problem code; answer: {self}");
        assert_eq!(
            problem["status"], status,
            "problem status member; answer: {self}"
        );
        problem
    }

    /// `Retry-After` in seconds; panics when it is absent or not a number.
    pub fn retry_after_s(&self) -> u64 {
        let value = self
            .header("retry-after")
            .unwrap_or_else(|| panic!("no retry-after header: {self}"));
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("retry-after `{value}` is not whole seconds ({e}): {self}"))
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", self.status)?;
        for (name, value) in &self.headers {
            write!(f, "[{name}: {value}] ")?;
        }
        write!(f, "{}", self.text())
    }
}

/// Asserts what a burst of same-key duplicates must see: every caller got the same status
/// (`status`) and body, exactly one of them the original and all others marked replays.
pub fn assert_one_answer_for_all(replies: &[Reply], status: u16) {
    let Some(first) = replies.first() else {
        panic!("no replies to compare");
    };
    assert_eq!(first.status, status, "{first}");
    for reply in replies {
        assert_eq!(
            (reply.status, &reply.body),
            (first.status, &first.body),
            "every caller gets the same answer: {reply} vs {first}"
        );
    }
    let originals = replies
        .iter()
        .filter(|reply| reply.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(
        originals,
        1,
        "one original answer, {} replays",
        replies.len() - 1
    );
}
