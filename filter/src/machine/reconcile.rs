//! `uncertain: reconcile`: a claim met an `unknown` record, so the service is asked what
//! became of its run, and its answer settles the record (`docs/reconcile.md`).
//!
//! `AskingService ─committed─▶ Reconciling ─ack─▶ Replied (the first run's answer)`;
//! `─absent─▶ Reconciling ─ack─▶ Claiming` (the request runs under a higher fence, which
//! the service's ledger admits); anything else answers `409 operation_unknown` with a
//! `Retry-After`, and the record stays `unknown` for the next retry to ask again.

use std::rc::Rc;

use keyflight_protocol::Digest;
use keyflight_protocol::problem::ProblemCode;
use keyflight_protocol::wire::reconcile::ReconciledRequest;

use super::{Action, LogLevel, Machine, Ready, State};
use crate::config::Policy;
use crate::log::Repeating;
use crate::metrics::{EventKind, Metric, Outcome};
use crate::problem::problem_reply;
use crate::reconcile::{ServiceQuestion, Settled, read_answer};
use crate::replay::{Unreplayable, replay};
use crate::store_call::{Answer, CallError, StoreCall};

impl Machine {
    /// Asks the service about run `fence` of the request's record, once per stream.
    pub(super) fn ask_service(&mut self, out: &mut Vec<Action>, ready: Ready, fence: i64) {
        let Some(question) = question(&ready, fence) else {
            return self.operation_unknown(out, &Rc::clone(&ready.policy), Some(fence));
        };
        self.asked_service = true;
        out.push(Action::AskService(question));
        self.state = State::AskingService { ready, fence };
    }

    /// The service answered (or could not be asked): report a usable answer to the
    /// lease-store, or leave the record `unknown`.
    pub(super) fn service_answered(&mut self, out: &mut Vec<Action>, answer: &Answer) {
        let (ready, fence) = match std::mem::take(&mut self.state) {
            State::AskingService { ready, fence } => (ready, fence),
            other => {
                self.state = other;
                return;
            }
        };
        let Some(question) = question(&ready, fence) else {
            return self.operation_unknown(out, &Rc::clone(&ready.policy), Some(fence));
        };
        let settled = match read_answer(answer, &question) {
            Ok(settled) => settled,
            Err(unusable) => {
                let why = unusable.to_string();
                let policy = Rc::clone(&ready.policy);
                return self.still_unknown(out, &policy, (ready.scope, fence), &why);
            }
        };
        let fingerprint = ready.fingerprint;
        let (request, said) = match &settled {
            Settled::Committed(response) => (
                ReconciledRequest::Committed {
                    fingerprint,
                    fence,
                    response: response.clone(),
                },
                "committed",
            ),
            Settled::Absent => (ReconciledRequest::Absent { fingerprint, fence }, "absent"),
        };
        out.push(Action::Log {
            level: LogLevel::Info,
            message: format!(
                "policy {}: scope {}: the service answered {said} for fence {fence}",
                ready.policy.name,
                ready.scope.to_hex()
            ),
        });
        out.push(Action::CallStore {
            call: StoreCall::Reconciled {
                scope: ready.scope,
                request,
            },
            timeout: self.config.lease_store.timeout,
        });
        self.state = State::Reconciling {
            ready,
            fence,
            settled,
        };
    }

    /// The lease-store took the report (or refused it).
    pub(super) fn reconciled_answered(
        &mut self,
        out: &mut Vec<Action>,
        result: Result<(), CallError>,
    ) {
        let (ready, fence, settled) = match std::mem::take(&mut self.state) {
            State::Reconciling {
                ready,
                fence,
                settled,
            } => (ready, fence, settled),
            other => {
                self.state = other;
                return;
            }
        };
        let policy = Rc::clone(&ready.policy);
        match (result, settled) {
            (Ok(()), Settled::Committed(response)) => {
                out.push(Action::Count(Metric::Event(EventKind::ReconcileCommitted)));
                match replay(&policy, response, &ready.accepted) {
                    Ok(reply) => self.reply_to_held_request(out, reply, Outcome::Replay),
                    Err(Unreplayable::Encoded(coding)) => self.not_decodable(out, &coding),
                    Err(Unreplayable::Malformed) => {
                        self.malformed_record(out, &policy, ready.scope)
                    }
                }
            }
            (Ok(()), Settled::Absent) => {
                out.push(Action::Count(Metric::Event(EventKind::ReconcileAbsent)));
                self.call_claim(out, ready);
            }
            // Another report, an operator or a later claim settled the record first: what
            // it holds now is the claim's to say.
            (Err(CallError::Status(409)), _) => self.call_claim(out, ready),
            (Err(error), _) => {
                let why = format!("the lease-store did not take the service's answer: {error}");
                self.still_unknown(out, &policy, (ready.scope, fence), &why);
            }
        }
    }

    /// `409 operation_unknown`. Where the service is asked, with a `Retry-After` and the
    /// run's fence in the detail, so the caller's report names the run an operator finds.
    pub(super) fn operation_unknown(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        fence: Option<i64>,
    ) {
        let code = ProblemCode::OperationUnknown;
        let Some(reconcile) = &policy.reconcile else {
            return self.refuse_held_request(out, policy, code, None, Outcome::OperationUnknown);
        };
        let detail = match fence {
            Some(fence) => format!(
                "the outcome of run {fence} (its idempotency-fence) is not known yet; \
                 the service is asked again on a retry"
            ),
            None => "the outcome is not known yet; the service is asked again on a retry".into(),
        };
        let status = policy.status_of(code, self.config.status_profile);
        let reply = problem_reply(code, status, &detail, Some(reconcile.retry_after_s));
        self.reply_to_held_request(out, reply, Outcome::OperationUnknown);
    }

    /// The service's answer settled nothing: counted, warned (rate-limited), and the
    /// caller told to come back.
    fn still_unknown(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        (scope, fence): (Digest, i64),
        why: &str,
    ) {
        out.push(Action::Count(Metric::Event(EventKind::ReconcileUnanswered)));
        out.push(Action::WarnRepeating {
            kind: Repeating::ReconcileUnanswered,
            message: format!(
                "policy {}: scope {}: {why}; the record stays unknown",
                policy.name,
                scope.to_hex()
            ),
        });
        self.operation_unknown(out, policy, Some(fence));
    }
}

/// The question about run `fence` of the request `ready` claims: `None` when its policy
/// does not reconcile.
fn question(ready: &Ready, fence: i64) -> Option<ServiceQuestion> {
    Some(ServiceQuestion {
        reconcile: Rc::clone(ready.policy.reconcile.as_ref()?),
        scope: ready.scope,
        fence,
    })
}
