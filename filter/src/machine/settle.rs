//! Settling the claim: the settle call's answer, and a claim the stream
//! cannot see settled handed to the worker's record outbox (F7, F14;
//! `docs/record-outbox.md#hand-off`).

use keyflight_protocol::wire::{ReleaseAs, StoredResponse};
use uuid::Uuid;

use super::response::{finalize_call, release_call};
use super::{Action, LogLevel, Machine, State};
use crate::config::Policy;
use crate::guarantee::{self, Cause};
use crate::log::{By, Settle, evidence};
use crate::metrics::{EventKind, Metric, Outcome};
use crate::outbox::Handoff;
use crate::store_call::{CallError, StoreCall};

impl Machine {
    /// F7: the settle call answered; whatever it said, the caller gets its
    /// response. A transient failure hands the call to the outbox (F14),
    /// which keeps the lease and resends it; the caller is not held longer.
    pub(super) fn settle_answered(&mut self, out: &mut Vec<Action>, result: Result<(), CallError>) {
        let State::Recording {
            call,
            policy,
            claim_id,
            fence,
            held,
            cache,
        } = std::mem::take(&mut self.state)
        else {
            return;
        };
        // A recording stream's call is its finalize or its release.
        let error_event = match call {
            StoreCall::Release { .. } => EventKind::ReleaseError,
            _ => EventKind::FinalizeError,
        };
        match result {
            Ok(()) => {
                out.push(Action::Log {
                    level: LogLevel::Info,
                    message: evidence(Settle::Landed, &call, fence, By::Stream, "recorded"),
                });
                self.stop_renewal(out);
                if let Some((key, entry)) = cache {
                    out.push(Action::WriteEdgeCache { key, entry });
                }
            }
            Err(CallError::LeaseLost) => {
                // Before StopRenewal: the outbox still knows whether a renew
                // already counted this theft.
                out.push(Action::LeaseLost { claim_id });
                self.stop_renewal(out);
                out.push(Action::Log {
                    level: LogLevel::Warn,
                    message: evidence(
                        Settle::LeaseLost,
                        &call,
                        fence,
                        By::Stream,
                        "the lease was stolen; delivering the response unrecorded",
                    ),
                });
            }
            Err(error) => {
                out.push(Action::Count(Metric::Event(error_event)));
                let note = format!(
                    "{} failed: {error}; delivering the response, the outbox keeps the lease \
                     and retries",
                    call.name()
                );
                let owner = (claim_id, fence);
                self.hand_off(out, &policy, owner, call, Some(error), &note);
            }
        }
        if held {
            out.push(Action::ResumeResponse);
        }
        self.state = State::Delivering;
    }

    /// The stream ended (`on_log`/`on_done`). A claim it won and has not
    /// settled passes to the outbox (F14) instead of being forgotten:
    /// forgetting it would leave the record pending until the lease runs
    /// out, and the next same-body retry would run the operation again.
    pub(super) fn stream_done(&mut self, out: &mut Vec<Action>) {
        match std::mem::take(&mut self.state) {
            // The caller left while the upstream ran: Envoy resets the
            // upstream request, so whether it acted is unknown (F6 uncertain).
            // There is no answer to record, so `record` holds it as `hold` does.
            State::Upstream(owned) => {
                let runs_again = guarantee::reruns(Cause::UncertainOutcome, owned.policy.uncertain);
                let (release_as, outcome) = match runs_again {
                    true => (ReleaseAs::Cooldown, Outcome::Failed),
                    false => (ReleaseAs::Unknown, Outcome::OperationUnknown),
                };
                self.count_outcome(out, outcome);
                out.push(Action::Count(Metric::Event(EventKind::CallerGone)));
                let call = release_call(&owned, release_as);
                let owner = (owned.claim_id, owned.fence);
                let note = "the caller left while the upstream ran; the outbox releases the claim";
                self.hand_off(out, &owned.policy, owner, call, None, note);
            }
            // The upstream answered a recordable status, and the caller left
            // before its whole body was read: the operation happened, but
            // there is no answer to replay. Completed, not replayable: a
            // retry gets 409 `response_not_replayable`, never a second run.
            State::BufferingResponse {
                owned,
                status,
                headers,
                ..
            } => {
                self.count_outcome(out, Outcome::CompletedUncacheable);
                out.push(Action::Count(Metric::Event(EventKind::CallerGone)));
                let response = StoredResponse {
                    status,
                    headers,
                    body: Vec::new(),
                };
                let call = finalize_call(&owned, response, false);
                let owner = (owned.claim_id, owned.fence);
                let note = "the caller left while the answer was read; the outbox records it \
                            as not replayable";
                self.hand_off(out, &owned.policy, owner, call, None, note);
            }
            // The settle call was in flight: it is cancelled with the stream,
            // and may or may not have landed. The store takes a repeat.
            State::Recording {
                call,
                policy,
                claim_id,
                fence,
                ..
            } => {
                let note = "the stream ended with its settle call in flight; the outbox resends it";
                let owner = (claim_id, fence);
                self.hand_off(out, &policy, owner, call, None, note);
            }
            _ => self.stop_renewal(out),
        }
        self.state = State::Done;
    }

    /// Passes the claim `(claim_id, fence)` and its settle call to the
    /// outbox (F14), and logs the hand-off as evidence with `note`: a
    /// warning when the stream's own call failed.
    pub(super) fn hand_off(
        &mut self,
        out: &mut Vec<Action>,
        policy: &Policy,
        (claim_id, fence): (Uuid, i64),
        call: StoreCall,
        last_error: Option<CallError>,
        note: &str,
    ) {
        self.renewing = None;
        out.push(Action::Log {
            level: match last_error {
                Some(_) => LogLevel::Warn,
                None => LogLevel::Info,
            },
            message: evidence(Settle::HandOff, &call, fence, By::Stream, note),
        });
        out.push(Action::HandOff(Handoff {
            claim_id,
            fence,
            call,
            last_error,
            budget: policy.record_retry_budget,
        }));
    }
}
