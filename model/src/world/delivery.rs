//! The proxies' side of the wire: answers reaching the streams and the outbox, and the
//! calls and client answers their decisions send.

use keyflight_filter::outbox::{CallId, CallKind, OutboxAction};
use keyflight_filter::store_call::{Answer, parse_ack_answer};

use crate::Params;
use crate::ghost::{Delivered, Execution};
use crate::proxy::{Effect, Fed, execution_of, store_timeout_ms};

use super::wire::{Wire, id16, uuid};
use super::{From, Request, Waiter, World};

impl World {
    /// Delivers `answer` to whoever sent `request` (`None` status: no answer).
    pub(super) fn answer(
        &mut self,
        params: &Params,
        request: &Request,
        (status, body): (Option<u16>, Vec<u8>),
    ) {
        let proxy = request.proxy;
        let p = usize::from(proxy);
        match request.from {
            From::Stream { client, attempt } => {
                let Some(s) = self.proxies[p]
                    .streams
                    .iter_mut()
                    .find(|s| s.client == client && s.attempt == attempt)
                else {
                    return;
                };
                let elapsed_ms = self.now.saturating_sub(request.sent_at);
                let fed = if matches!(request.call, Wire::Question { .. }) {
                    Fed::ServiceAnswer(status, body)
                } else {
                    Fed::Answer(status, body, elapsed_ms)
                };
                let effects = s.feed(&params.filter, fed);
                self.effects(params, proxy, client, effects);
            }
            From::Outbox { claim, renew } => {
                let id = CallId {
                    claim_id: uuid(claim),
                    kind: if renew {
                        CallKind::Renew
                    } else {
                        CallKind::Settle
                    },
                };
                let result = parse_ack_answer(&Answer::Received {
                    status,
                    body,
                    framed: false,
                });
                let actions = self.proxies[p].outbox.0.on_answer(id, result, self.now);
                self.outbox_actions(params, proxy, actions);
            }
        }
    }

    pub(super) fn outbox_actions(
        &mut self,
        params: &Params,
        proxy: u8,
        actions: Vec<OutboxAction>,
    ) {
        let timeout = store_timeout_ms(&params.filter);
        for action in actions {
            match action {
                OutboxAction::Dispatch { id, call } => {
                    self.net.push(Request {
                        proxy,
                        from: From::Outbox {
                            claim: id16(id.claim_id),
                            renew: id.kind == CallKind::Renew,
                        },
                        sent_at: self.now,
                        deadline: self.now + timeout,
                        call: Wire::of(&call, proxy, params),
                        waiter: Waiter::Proxy,
                        delayed: false,
                        served: false,
                    });
                    self.net.sort();
                }
                OutboxAction::Log { message, .. } => {
                    if message.starts_with("evidence=given_up")
                        && let Some(fence) = message
                            .split(' ')
                            .find_map(|w| w.strip_prefix("fence="))
                            .and_then(|f| f.parse().ok())
                    {
                        self.ghost.given_up.push((fence, self.now));
                    }
                    if message.starts_with("evidence=settle_landed") {
                        self.ghost.outbox_landed = true;
                    }
                }
                OutboxAction::Count(_) | OutboxAction::Adjust { .. } => {}
            }
        }
    }

    /// Carries out what a stream of `client` on `proxy` asked for.
    pub(super) fn effects(&mut self, params: &Params, proxy: u8, client: u8, effects: Vec<Effect>) {
        let p = usize::from(proxy);
        let now = self.now;
        for effect in effects {
            match effect {
                Effect::Call(call, timeout_ms) => {
                    let call = Wire::of(&call, proxy, params);
                    self.send(proxy, client, call, timeout_ms);
                }
                Effect::Ask(scope, fence, timeout_ms) => {
                    self.send(proxy, client, Wire::Question { scope, fence }, timeout_ms);
                }
                Effect::Forward(fence) => {
                    let n = self.ghost.executions.len() as u16 + 1;
                    let Some(s) = self.proxies[p]
                        .streams
                        .iter_mut()
                        .find(|s| s.client == client)
                    else {
                        continue;
                    };
                    s.execution = Some(n);
                    s.upstream = Some((n, now));
                    self.ghost.executions.push(Execution {
                        n,
                        op: s.op,
                        fence: fence.unwrap_or(0),
                        proxy,
                        at: now,
                    });
                }
                Effect::Reply(status, body) => {
                    self.deliver(client, status, execution_of(&body));
                    self.end_stream(params, proxy, client);
                }
                Effect::ResumeResponse => {
                    let execution = self.proxies[p]
                        .streams
                        .iter()
                        .find(|s| s.client == client)
                        .and_then(|s| s.execution);
                    self.deliver(client, 201, execution);
                    self.end_stream(params, proxy, client);
                }
                Effect::StartRenewal(lease) => self.proxies[p].outbox.0.start(lease, now),
                Effect::StopRenewal(claim) => self.proxies[p].outbox.0.stop(claim),
                Effect::LeaseLost(claim) => {
                    let actions = self.proxies[p].outbox.0.lease_lost(claim);
                    self.outbox_actions(params, proxy, actions);
                }
                Effect::HandOff(handoff) => {
                    let actions = self.proxies[p].outbox.0.hand_off(handoff, now);
                    self.outbox_actions(params, proxy, actions);
                }
            }
        }
    }

    /// Puts a call of `client`'s stream on `proxy` on the wire.
    pub(super) fn send(&mut self, proxy: u8, client: u8, call: Wire, timeout_ms: u64) {
        let p = usize::from(proxy);
        let Some(s) = self.proxies[p].streams.iter().find(|s| s.client == client) else {
            return;
        };
        self.net.push(Request {
            proxy,
            from: From::Stream {
                client,
                attempt: s.attempt,
            },
            sent_at: self.now,
            deadline: self.now + timeout_ms,
            call,
            waiter: Waiter::Proxy,
            delayed: false,
            served: false,
        });
        self.net.sort();
    }

    pub(super) fn deliver(&mut self, client: u8, status: u16, execution: Option<u16>) {
        let op = self.clients[usize::from(client)].op;
        self.ghost.delivered.push(Delivered {
            op,
            status,
            execution,
            at: self.now,
        });
    }

    /// The stream of `client` on `proxy` ends (answered, or its client went away):
    /// its machine sees the end, its call in flight is reset.
    pub(super) fn end_stream(&mut self, params: &Params, proxy: u8, client: u8) {
        let p = usize::from(proxy);
        let Some(i) = self.proxies[p]
            .streams
            .iter()
            .position(|s| s.client == client)
        else {
            return;
        };
        let mut stream = self.proxies[p].streams.remove(i);
        self.orphan_run(params, &stream);
        let effects = stream.feed(&params.filter, Fed::Done);
        self.clients[usize::from(client)].busy = false;
        let from = From::Stream {
            client,
            attempt: stream.attempt,
        };
        for r in &mut self.net {
            if r.proxy == proxy && r.from == from && r.waiter == Waiter::Proxy {
                r.waiter = Waiter::Reset;
            }
        }
        self.net.sort();
        // The stream is gone: what it asks now is the outbox's (a hand-off).
        self.effects(params, proxy, client, effects);
    }
}
