//! A lease-store replica serving a request against the database mirror, and the upstream
//! service answering a reconcile question.

use keyflight_protocol::Digest;
use keyflight_protocol::wire::reconcile::ServiceAnswer;
use keyflight_protocol::wire::{ClaimAnswer, ClaimResponse, StoredResponse};
use keyflight_store_core::orphan::OrphanRelease;

use crate::Params;
use crate::db::{ClaimArgs, Lost, Recorded, Settle};
use crate::proxy::body_of;
use crate::service::Said;

use super::wire::{SettleWire, Wire, uuid};
use super::{From, Request, ServeFault, Waiter, World};

fn claim_answer(
    response: ClaimResponse,
    record_expires_in_ms: Option<u64>,
) -> (Option<u16>, Vec<u8>) {
    let answer = ClaimAnswer {
        response,
        record_expires_in_ms,
        claimed_after_ms: None,
    };
    (Some(200), serde_json::to_vec(&answer).unwrap_or_default())
}

fn ack(ok: bool) -> (Option<u16>, Vec<u8>) {
    if ok {
        (Some(200), b"{}".to_vec())
    } else {
        (Some(409), br#"{"code":"lease_lost","status":409}"#.to_vec())
    }
}

impl World {
    pub(super) fn serve(
        &mut self,
        params: &Params,
        request: Request,
        replica: u8,
        fault: ServeFault,
    ) {
        self.net.retain(|r| *r != request);
        match fault {
            ServeFault::None => {}
            ServeFault::LoseAnswer => self.net.push(Request {
                served: true,
                ..request.clone()
            }),
            ServeFault::Duplicate => self.net.push(Request {
                waiter: Waiter::Copy,
                ..request.clone()
            }),
        }
        self.net.sort();
        let now = self.now;
        if let Wire::Question { scope, fence } = request.call {
            let answer = self.question(params, scope, fence);
            if fault == ServeFault::None && request.waiter == Waiter::Proxy {
                self.answer(params, &request, answer);
            }
            return;
        }
        let r = &mut self.replicas[usize::from(replica)];
        if !self.db.up {
            r.grace.failed();
            if fault == ServeFault::None {
                let answer = (Some(503), br#"{"code":"journal_unavailable"}"#.to_vec());
                self.answer(params, &request, answer);
            }
            return;
        }
        let may_take_over = !r.held(now);
        r.database_call(true, now);
        let answer = match &request.call {
            Wire::Claim {
                fingerprint,
                lease_ms,
                retention_ms,
                at_most_once,
            } => {
                let op = match request.from {
                    From::Stream { client, .. } => self.clients[usize::from(client)].op,
                    From::Outbox { .. } => u8::MAX,
                };
                let args = ClaimArgs {
                    fingerprint: *fingerprint,
                    lease_ms: *lease_ms,
                    retention_ms: *retention_ms,
                    may_take_over,
                    at_most_once: *at_most_once,
                };
                match self.db.claim(now, args, params, &mut self.ghost, op) {
                    Ok((how, fence)) => {
                        if request.waiter == Waiter::Reset {
                            self.replicas[usize::from(replica)]
                                .orphans
                                .push((fence, OrphanRelease::after(how.wire())));
                        }
                        claim_answer(
                            ClaimResponse::Won {
                                claim_id: uuid(fence),
                                fence: i64::from(fence),
                                how: how.wire(),
                                lease_ms: *lease_ms,
                            },
                            None,
                        )
                    }
                    Err(Lost::Completed(Some(rec), left)) => claim_answer(
                        ClaimResponse::Completed {
                            response: StoredResponse::new(rec.status, rec.headers, &rec.body),
                        },
                        Some(left),
                    ),
                    Err(Lost::Completed(None, _)) => {
                        claim_answer(ClaimResponse::NotReplayable, None)
                    }
                    Err(Lost::Conflict) => claim_answer(ClaimResponse::Conflict, None),
                    Err(Lost::InProgress(s)) => {
                        claim_answer(ClaimResponse::InProgress { retry_after_s: s }, None)
                    }
                    Err(Lost::Cooldown(s)) => {
                        claim_answer(ClaimResponse::Cooldown { retry_after_s: s }, None)
                    }
                    Err(Lost::Unknown(fence)) => claim_answer(
                        ClaimResponse::Unknown {
                            fence: Some(i64::from(fence)),
                        },
                        None,
                    ),
                }
            }
            Wire::Renew { claim, lease_ms } => ack(self.db.renew(now, *claim, *lease_ms)),
            Wire::Settle { claim, settle } => {
                let settle = match settle {
                    SettleWire::Finalize(status, body, replayable) => Settle::Finalize {
                        response: Recorded {
                            status: *status,
                            headers: vec![("content-type".into(), "text/plain".into())],
                            body: body.clone(),
                        },
                        replayable: *replayable,
                    },
                    SettleWire::Cooldown(ms) => Settle::Cooldown { cooldown_ms: *ms },
                    SettleWire::Unknown => Settle::Unknown,
                    SettleWire::Forget => Settle::Forget,
                };
                ack(self
                    .db
                    .settle(now, *claim, &settle, params, &mut self.ghost))
            }
            Wire::Reconciled {
                fingerprint,
                fence,
                committed,
            } => {
                let answer = committed.clone();
                match self
                    .db
                    .reconciled(now, (*fence, *fingerprint), answer, &mut self.ghost)
                {
                    Ok(()) => (Some(200), b"{}".to_vec()),
                    Err(true) => (
                        Some(409),
                        br#"{"code":"not_unknown","status":409}"#.to_vec(),
                    ),
                    Err(false) => (Some(404), br#"{"code":"not_found","status":404}"#.to_vec()),
                }
            }
            // The service answered it, above.
            Wire::Question { .. } => return,
        };
        if fault == ServeFault::None && request.waiter == Waiter::Proxy {
            self.answer(params, &request, answer);
        }
    }

    /// The service's endpoint: the ledger's answer to the question about run `fence`, as
    /// `keyflight_effects::reconcile` renders it.
    pub(super) fn question(
        &mut self,
        params: &Params,
        scope: Digest,
        fence: u16,
    ) -> (Option<u16>, Vec<u8>) {
        let answer = match self.service.question(fence, params) {
            Said::Committed(n) => ServiceAnswer::Committed {
                scope,
                fence: i64::from(fence),
                response: StoredResponse::new(
                    201,
                    vec![("content-type".into(), "text/plain".into())],
                    &body_of(n),
                ),
            },
            Said::Absent => {
                self.ghost.absent_said.push((fence, self.now));
                ServiceAnswer::Absent {
                    scope,
                    fence: i64::from(fence),
                }
            }
        };
        (Some(200), serde_json::to_vec(&answer).unwrap_or_default())
    }
}
