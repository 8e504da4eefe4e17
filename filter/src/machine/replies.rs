//! Local replies, named for when they happen (F10, F11;
//! `docs/stream-machine.md#local-replies`).
//!
//! - *In a callback*: a refusal decided while the host is inside a request
//!   callback, before any claim (a bad key, no principal, a body too large).
//!   The reply goes out and the callback's `Pause` holds the request; in
//!   `dry_run` nothing is sent and the callback's `Continue` lets it through.
//! - *To a held request*: the request is held — waiting for the claim's
//!   answer, or for the edge-cache read's follow-up — when the answer is a
//!   reply (a replay or a refusal). In `dry_run` the request is resumed
//!   instead: a host resume after a call answered, the callback's `Continue`
//!   inside one (`docs/stream-machine.md#callback-rules`).

use keyflight_protocol::problem::ProblemCode;

use super::{Action, Machine, State};
use crate::config::{Mode, Policy};
use crate::metrics::{Metric, Outcome};
use crate::problem::{LocalReply, problem_reply};

impl Machine {
    /// A refusal during a request callback (bad key, no principal, too large).
    pub(super) fn refuse_in_callback(
        &mut self,
        out: &mut Vec<Action>,
        code: ProblemCode,
        detail: &str,
    ) {
        if self.config.mode == Mode::DryRun {
            out.push(Action::Count(Metric::DryRun(Outcome::RejectedInvalid)));
            self.state = State::Passthrough;
            return;
        }
        let reply = problem_reply(
            code,
            code.status_under(self.config.status_profile),
            detail,
            None,
        );
        out.push(Action::Reply(reply));
        out.push(Action::Count(Metric::Outcome(Outcome::RejectedInvalid)));
        self.state = State::Replied;
    }

    pub(super) fn refuse_too_large_in_callback(&mut self, out: &mut Vec<Action>, policy: &Policy) {
        let detail = format!(
            "the request body exceeds {} bytes",
            policy.max_request_body_bytes
        );
        self.refuse_in_callback(out, ProblemCode::PayloadTooLarge, &detail);
    }

    /// A refusal after the claim answered (the request is paused), with the
    /// status `policy` gives `code`.
    pub(super) fn refuse_held_request(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        code: ProblemCode,
        retry_after_s: Option<u64>,
        outcome: Outcome,
    ) {
        let status = policy.status_of(code, self.config.status_profile);
        let reply = problem_reply(code, status, code.title(), retry_after_s);
        self.reply_to_held_request(out, reply, outcome);
    }

    /// Sends `reply` (enforce) or lets the request through and counts what
    /// would have happened (dry run: never block, never replay). Called from
    /// a claim answer, outside any request callback, so a dry run resumes.
    pub(super) fn reply_to_held_request(
        &mut self,
        out: &mut Vec<Action>,
        reply: LocalReply,
        outcome: Outcome,
    ) {
        self.count_outcome(out, outcome);
        if self.config.mode == Mode::DryRun {
            out.push(Action::ResumeRequest);
            self.state = State::Passthrough;
        } else {
            out.push(Action::Reply(reply));
            self.state = State::Replied;
        }
    }
}
