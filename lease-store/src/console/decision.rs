//! An operator's decision as the console's forms carry it, and what a retry gets after it
//! (`docs/console.md#decisions`): pure, so the preview and the confirmation read the same
//! fields the same way.
//!
//! The decision itself runs through the admin API's own path
//! (`crate::api::records::resolve_as_operator`, `erase_as_operator`), whose store statement
//! writes the audit row with the change.

use keyflight_protocol::wire::{ResolveAs, StoredResponse};
use serde::Deserialize;

/// The three decisions on a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The operation happened: record the authored answer (or none: not replayable).
    ResolveCompleted,
    /// The operation did not happen: the next same-body retry runs.
    ResolveFailed,
    /// Forget the record: the next request with its key runs as new.
    Erase,
}

impl Action {
    /// The spelling in forms and in the audit.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::ResolveCompleted => "resolve_completed",
            Action::ResolveFailed => "resolve_failed",
            Action::Erase => "erase",
        }
    }
}

/// The fields of a decision's forms: the preview's query, and the confirmation's body,
/// which adds the reason, the confirmation and the CSRF token. Text throughout: a form
/// sends an empty box as `name=`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionForm {
    /// Which decision.
    pub action: Action,
    /// The authored answer's status (resolve as completed); empty: no answer.
    #[serde(default)]
    pub status: String,
    /// The authored answer's headers, one `name: value` a line.
    #[serde(default)]
    pub headers: String,
    /// The authored answer's body, as text.
    #[serde(default)]
    pub body: String,
    /// Why (confirmation only); kept in the audit.
    pub reason: Option<String>,
    /// `yes` when the operator ticked the confirmation (confirmation only).
    pub confirm: Option<String>,
    /// The form's CSRF token (confirmation only).
    pub csrf: Option<String>,
}

/// A decision, read from its form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Resolve an `unknown` record.
    Resolve(ResolveAs, Option<StoredResponse>),
    /// Erase the record.
    Erase,
}

/// What a retry with the record's key and body gets once the decision is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retry<'a> {
    /// This answer, replayed from the record.
    Replays(&'a StoredResponse),
    /// `409 response_not_replayable`: completed, with no answer kept.
    NotReplayable,
    /// The request runs again, under a higher fence.
    RunsAgain,
    /// The request runs as new: the record and its fingerprint are gone, so another body
    /// with the same key runs too.
    RunsAsNew,
}

impl DecisionForm {
    /// The decision the form describes; the error says which field is wrong.
    pub fn decision(&self) -> Result<Decision, String> {
        match self.action {
            Action::ResolveFailed => Ok(Decision::Resolve(ResolveAs::Failed, None)),
            Action::Erase => Ok(Decision::Erase),
            Action::ResolveCompleted => {
                let status = self.status.trim();
                if status.is_empty() {
                    if !self.headers.trim().is_empty() || !self.body.is_empty() {
                        return Err("an answer with headers or a body needs a status".into());
                    }
                    return Ok(Decision::Resolve(ResolveAs::Completed, None));
                }
                let status = status
                    .parse()
                    .map_err(|_| "status must be a number from 100 to 599".to_owned())?;
                let headers = headers(&self.headers)?;
                Ok(Decision::Resolve(
                    ResolveAs::Completed,
                    Some(StoredResponse::new(status, headers, self.body.as_bytes())),
                ))
            }
        }
    }
}

impl Decision {
    /// What a retry gets after it.
    pub fn retry(&self) -> Retry<'_> {
        match self {
            Decision::Resolve(ResolveAs::Completed, Some(response)) => Retry::Replays(response),
            Decision::Resolve(ResolveAs::Completed, None) => Retry::NotReplayable,
            Decision::Resolve(ResolveAs::Failed, _) => Retry::RunsAgain,
            Decision::Erase => Retry::RunsAsNew,
        }
    }
}

/// `name: value` lines as recorded headers, names lower-cased as recorded headers are;
/// blank lines skipped. The recorded-header rule itself is the API's check, on the one path.
fn headers(text: &str) -> Result<Vec<(String, String)>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(index, line)| {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("header line {} is not `name: value`", index + 1))?;
            Ok((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(action: Action, status: &str, headers: &str, body: &str) -> DecisionForm {
        DecisionForm {
            action,
            status: status.into(),
            headers: headers.into(),
            body: body.into(),
            reason: None,
            confirm: None,
            csrf: None,
        }
    }

    #[test]
    fn an_authored_answer_is_read_as_it_will_be_recorded() {
        let decision = form(
            Action::ResolveCompleted,
            "201",
            "Content-Type: application/json\r\n\r\netag: \"v1\"",
            "{}",
        )
        .decision();
        let expected = StoredResponse::new(
            201,
            vec![
                ("content-type".into(), "application/json".into()),
                ("etag".into(), "\"v1\"".into()),
            ],
            b"{}",
        );
        assert_eq!(
            decision,
            Ok(Decision::Resolve(ResolveAs::Completed, Some(expected)))
        );
    }

    #[test]
    fn each_decision_says_what_a_retry_gets() {
        let no_answer = form(Action::ResolveCompleted, " ", "", "").decision();
        assert_eq!(
            no_answer.map(|d| d.retry() == Retry::NotReplayable),
            Ok(true)
        );
        let failed = form(Action::ResolveFailed, "200", "", "ignored").decision();
        assert_eq!(failed.map(|d| d.retry() == Retry::RunsAgain), Ok(true));
        let erase = form(Action::Erase, "", "", "").decision();
        assert_eq!(erase.map(|d| d.retry() == Retry::RunsAsNew), Ok(true));
    }

    #[test]
    fn a_malformed_answer_is_refused_naming_its_field() {
        let body_without_status = form(Action::ResolveCompleted, "", "", "x").decision();
        assert!(body_without_status.is_err_and(|e| e.contains("status")));
        let bad_status = form(Action::ResolveCompleted, "2xx", "", "").decision();
        assert!(bad_status.is_err_and(|e| e.contains("status")));
        let bad_header = form(Action::ResolveCompleted, "200", "etag", "").decision();
        assert!(bad_header.is_err_and(|e| e.contains("header line 1")));
    }
}
