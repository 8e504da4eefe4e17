//! `uncertain: reconcile`: the question a filter asks the service about a run whose
//! outcome is uncertain, and how its answer is read (`docs/reconcile.md`). Pure: the
//! driver dispatches the question and feeds the answer back.

use std::rc::Rc;

use keyflight_protocol::Digest;
use keyflight_protocol::wire::StoredResponse;
use keyflight_protocol::wire::reconcile::ServiceAnswer;

use crate::config::Reconcile;
use crate::machine::{FENCE_HEADER, SCOPE_HEADER};
use crate::store_call::Answer;

/// What the service is asked: what became of run `fence` of operation `scope`. It carries
/// the scope the filter forwards upstream and nothing a caller sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceQuestion {
    /// Where to ask.
    pub reconcile: Rc<Reconcile>,
    /// The operation, as forwarded to the service (`idempotency-scope`).
    pub scope: Digest,
    /// The run whose outcome is uncertain.
    pub fence: i64,
}

impl ServiceQuestion {
    /// The question's headers: `:method`, `:path`, `:authority` (a callout needs all
    /// three), the operation's two headers as the service's ledger reads them, and
    /// keyflight's bearer token when one is configured.
    pub fn headers(&self, token: Option<&str>) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            (":method", "POST".to_owned()),
            (":path", self.reconcile.path.clone()),
            (":authority", self.reconcile.authority.clone()),
            (SCOPE_HEADER, self.scope.to_hex()),
            (FENCE_HEADER, self.fence.to_string()),
            ("content-length", "0".to_owned()),
        ];
        if let Some(token) = token {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        headers
    }
}

/// What the service's ledger said, once checked against the question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// A run committed; retries replay its answer.
    Committed(StoredResponse),
    /// No run committed, and the asked fence is fenced out.
    Absent,
}

/// Why an answer settles nothing: the record stays `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// No answer: not sent, a failed call, a timeout.
    #[error("the service did not answer")]
    NoAnswer,
    /// An answer other than 200 (the endpoint missing, the token refused, the ledger down).
    #[error("the service answered {0}")]
    Status(u16),
    /// A 200 whose body is not a reconcile answer.
    #[error("the service's answer is not a reconcile answer")]
    Malformed,
    /// An answer about another operation or run.
    #[error("the service answered about another scope or fence")]
    Mismatched,
}

/// Reads the service's answer to `question`.
pub fn read_answer(answer: &Answer, question: &ServiceQuestion) -> Result<Settled, Unusable> {
    let body = match answer {
        Answer::NotSent | Answer::Received { status: None, .. } => {
            return Err(Unusable::NoAnswer);
        }
        Answer::Received {
            status: Some(200),
            body,
            ..
        } => body,
        Answer::Received {
            status: Some(status),
            ..
        } => return Err(Unusable::Status(*status)),
    };
    let (scope, fence, settled) = match serde_json::from_slice::<ServiceAnswer>(body) {
        Ok(ServiceAnswer::Committed {
            scope,
            fence,
            response,
        }) => (scope, fence, Settled::Committed(response)),
        Ok(ServiceAnswer::Absent { scope, fence }) => (scope, fence, Settled::Absent),
        Err(_) => return Err(Unusable::Malformed),
    };
    if (scope, fence) != (question.scope, question.fence) {
        return Err(Unusable::Mismatched);
    }
    Ok(settled)
}

/// Whether a caller's request names the path of a policy's reconcile endpoint: such a
/// request is refused at the edge, so only keyflight reaches the endpoint through it.
pub fn is_reserved(path: &str, reconcile: &Reconcile) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    path == reconcile.path
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn question() -> ServiceQuestion {
        ServiceQuestion {
            reconcile: Rc::new(Reconcile {
                cluster: "payments".into(),
                authority: "payments.internal".into(),
                path: "/.well-known/keyflight/reconcile".into(),
                timeout: Duration::from_secs(2),
                token_env: None,
                retry_after_s: 1,
            }),
            scope: Digest([7; 32]),
            fence: 42,
        }
    }

    fn ok(body: &str) -> Answer {
        Answer::ok(body.as_bytes().to_vec())
    }

    #[test]
    fn a_committed_answer_about_the_question_settles_it() {
        let scope = Digest([7; 32]).to_hex();
        let answer = ok(&format!(
            r#"{{"outcome":"committed","scope":"{scope}","fence":42,"response":{{"status":201,"headers":[],"body_b64":"e30="}}}}"#
        ));
        assert_eq!(
            read_answer(&answer, &question()),
            Ok(Settled::Committed(StoredResponse::new(201, vec![], b"{}")))
        );
        let absent = ok(&format!(
            r#"{{"outcome":"absent","scope":"{scope}","fence":42}}"#
        ));
        assert_eq!(read_answer(&absent, &question()), Ok(Settled::Absent));
    }

    #[test]
    fn an_answer_about_another_run_or_scope_is_refused() {
        let other = Digest([8; 32]).to_hex();
        let scope = Digest([7; 32]).to_hex();
        for body in [
            format!(r#"{{"outcome":"absent","scope":"{scope}","fence":41}}"#),
            format!(r#"{{"outcome":"absent","scope":"{other}","fence":42}}"#),
        ] {
            assert_eq!(
                read_answer(&ok(&body), &question()),
                Err(Unusable::Mismatched),
                "{body}"
            );
        }
    }

    #[test]
    fn no_answer_an_error_or_garbage_settles_nothing() {
        let q = question();
        assert_eq!(read_answer(&Answer::NotSent, &q), Err(Unusable::NoAnswer));
        let failed = Answer::Received {
            status: None,
            body: vec![],
            framed: false,
        };
        assert_eq!(read_answer(&failed, &q), Err(Unusable::NoAnswer));
        let refused = Answer::Received {
            status: Some(401),
            body: vec![],
            framed: false,
        };
        assert_eq!(read_answer(&refused, &q), Err(Unusable::Status(401)));
        assert_eq!(read_answer(&ok("{}"), &q), Err(Unusable::Malformed));
        assert_eq!(read_answer(&ok("absent"), &q), Err(Unusable::Malformed));
    }

    #[test]
    fn the_question_carries_the_operation_and_the_token_only() {
        let headers = question().headers(Some("s3cret"));
        let scope = Digest([7; 32]).to_hex();
        assert!(headers.contains(&("idempotency-scope", scope)));
        assert!(headers.contains(&("idempotency-fence", "42".to_owned())));
        assert!(headers.contains(&("authorization", "Bearer s3cret".to_owned())));
        assert!(
            !question()
                .headers(None)
                .iter()
                .any(|(n, _)| *n == "authorization")
        );
    }

    #[test]
    fn the_endpoint_path_is_reserved_whatever_its_query() {
        let q = question();
        assert!(is_reserved(
            "/.well-known/keyflight/reconcile",
            &q.reconcile
        ));
        assert!(is_reserved(
            "/.well-known/keyflight/reconcile?x=1",
            &q.reconcile
        ));
        assert!(!is_reserved(
            "/.well-known/keyflight/reconcile/x",
            &q.reconcile
        ));
        assert!(!is_reserved("/pay", &q.reconcile));
    }
}
