//! The JSON document `keyflight send` prints on stdout, whatever happened.
//!
//! It always carries the `operation_id` (the key, generated or given), so a
//! caller who lost the answer can retry the same operation, and the exit
//! code and outcome name. An answer adds its status, whether it was a replay,
//! and its body: `problem` for RFC 9457 problem details, else `body` as JSON
//! when it parses, as text when it is UTF-8, else `body_b64`.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::outcome::Outcome;

/// What the command knows at the end.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// The key sent with every attempt.
    pub operation_id: &'a str,
    /// Whether the command generated it.
    pub generated: bool,
    /// Requests sent (1 + retries).
    pub attempts: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// The last answer, if one came.
    pub answer: Option<Answer<'a>>,
    /// Why no answer came (or why nothing was sent).
    pub error: Option<String>,
}

/// An HTTP answer as the report shows it.
#[derive(Debug, Clone)]
pub struct Answer<'a> {
    /// The status code.
    pub status: u16,
    /// `content-type`, if any.
    pub content_type: Option<&'a str>,
    /// `idempotent-replayed: true` was present.
    pub replayed: bool,
    /// The body.
    pub body: &'a [u8],
}

impl Report<'_> {
    /// The document.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("operation_id".into(), json!(self.operation_id));
        out.insert("operation_id_generated".into(), json!(self.generated));
        out.insert("outcome".into(), json!(self.outcome.as_str()));
        out.insert("exit_code".into(), json!(self.outcome.exit_code()));
        out.insert("attempts".into(), json!(self.attempts));
        if let Some(answer) = &self.answer {
            out.insert("status".into(), json!(answer.status));
            out.insert("replayed".into(), json!(answer.replayed));
            let (field, body) = body_field(answer);
            out.insert(field.into(), body);
        }
        if let Some(error) = &self.error {
            out.insert("error".into(), json!(error));
        }
        Value::Object(out)
    }
}

fn body_field(answer: &Answer<'_>) -> (&'static str, Value) {
    let essence = answer
        .content_type
        .and_then(|ct| ct.split(';').next())
        .map(|ct| ct.trim().to_ascii_lowercase());
    let parsed = serde_json::from_slice::<Value>(answer.body).ok();
    match (essence.as_deref(), parsed) {
        (Some("application/problem+json"), Some(problem)) => ("problem", problem),
        (_, Some(json)) => ("body", json),
        _ => match std::str::from_utf8(answer.body) {
            Ok(text) => ("body", json!(text)),
            Err(_) => (
                "body_b64",
                json!(base64::engine::general_purpose::STANDARD.encode(answer.body)),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report<'a>(answer: Option<Answer<'a>>, outcome: Outcome) -> Value {
        Report {
            operation_id: "op-1",
            generated: true,
            attempts: 2,
            outcome,
            answer,
            error: None,
        }
        .to_json()
    }

    #[test]
    fn a_problem_is_printed_as_problem_json() {
        let body = br#"{"type":"t","title":"Conflict","status":409,"detail":"d","code":"idempotency_conflict"}"#;
        let doc = report(
            Some(Answer {
                status: 409,
                content_type: Some("application/problem+json"),
                replayed: false,
                body,
            }),
            Outcome::Conflict,
        );
        assert_eq!(doc["problem"]["code"], "idempotency_conflict");
        assert_eq!(doc["exit_code"], 4);
        assert_eq!(doc["outcome"], "conflict");
        assert_eq!(doc["operation_id"], "op-1");
        assert_eq!(doc["attempts"], 2);
        assert!(doc.get("body").is_none());
    }

    #[test]
    fn bodies_are_json_text_or_base64() {
        let answer = |body: &'static [u8]| {
            Some(Answer {
                status: 201,
                content_type: Some("application/json"),
                replayed: true,
                body,
            })
        };
        let doc = report(answer(br#"{"id":1}"#), Outcome::Success);
        assert_eq!(doc["body"]["id"], 1);
        assert_eq!(doc["replayed"], true);
        assert_eq!(report(answer(b"plain"), Outcome::Success)["body"], "plain");
        assert_eq!(
            report(answer(&[0xff, 0x00]), Outcome::Success)["body_b64"],
            "/wA="
        );
    }

    #[test]
    fn no_answer_still_reports_the_operation_id() {
        let doc = Report {
            operation_id: "op-2",
            generated: false,
            attempts: 1,
            outcome: Outcome::Unknown,
            answer: None,
            error: Some("timed out".into()),
        }
        .to_json();
        assert_eq!(doc["operation_id"], "op-2");
        assert_eq!(doc["exit_code"], 6);
        assert_eq!(doc["error"], "timed out");
        assert!(doc.get("status").is_none());
    }
}
