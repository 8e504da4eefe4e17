//! The world the checker explores: proxies running the real filter code, lease-store
//! replicas, the database, the network between them, the upstream and the clients,
//! and every step any of them (or a fault) can take (`docs/model.md`).

use keyflight_filter::outbox::{CallId, CallKind, OutboxAction};
use keyflight_filter::store_call::{Answer, StoreCall, parse_ack_answer};
use keyflight_protocol::Digest;
use keyflight_protocol::wire::reconcile::{ReconciledRequest, ServiceAnswer};
use keyflight_protocol::wire::{ClaimAnswer, ClaimResponse, ReleaseAs, StoredResponse};
use keyflight_store_core::orphan::OrphanRelease;
use uuid::Uuid;

use crate::db::{ClaimArgs, Db, Lost, Recorded, Settle};
use crate::ghost::{Delivered, Execution, Ghost};
use crate::proxy::{Effect, Fed, Proxy, Stream, body_of, execution_of, store_timeout_ms};
use crate::replica::Replica;
use crate::service::{Said, Service};
use crate::{Params, TICK_MS, Uncertain};

/// The store's default cooldown (`--failure-cooldown`), for a release that names none.
const STORE_COOLDOWN_MS: u64 = 2000;

/// Which call of its proxy a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum From {
    /// A stream's claim or settle call.
    Stream {
        /// The client.
        client: u8,
        /// Its attempt.
        attempt: u8,
    },
    /// An outbox call.
    Outbox {
        /// The claim (its fence).
        claim: u16,
        /// Renew (`true`) or settle.
        renew: bool,
    },
}

/// A store call on the wire, as the database mirror takes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wire {
    /// `POST /v1/claims/{scope}`.
    Claim {
        /// The fingerprint.
        fingerprint: Digest,
        /// `lease_ms`.
        lease_ms: u64,
        /// The retention, ms.
        retention_ms: u64,
        /// `at_most_once`.
        at_most_once: bool,
    },
    /// `…/renew`.
    Renew {
        /// The claim.
        claim: u16,
        /// `lease_ms`.
        lease_ms: u64,
    },
    /// `…/finalize` or `…/release`.
    Settle {
        /// The claim.
        claim: u16,
        /// What it writes.
        settle: SettleWire,
    },
    /// `…/reconciled`: what the service said about run `fence` (its answer: committed).
    Reconciled {
        /// The fingerprint.
        fingerprint: Digest,
        /// The fence asked about.
        fence: u16,
        /// The committed run's answer; `None` is absent.
        committed: Option<Recorded>,
    },
    /// The reconcile question to the service (not the lease-store) about run `fence`.
    Question {
        /// `idempotency-scope`.
        scope: Digest,
        /// `idempotency-fence`.
        fence: u16,
    },
}

/// A settle call's payload, ordered for the network's canonical order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SettleWire {
    /// Finalize: status, body, replayable.
    Finalize(u16, Vec<u8>, bool),
    /// Release as cooldown.
    Cooldown(u64),
    /// Release as unknown.
    Unknown,
    /// Release as forget.
    Forget,
}

/// Who reads a request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Waiter {
    /// Its proxy waits for the answer.
    Proxy,
    /// Its proxy stopped waiting and reset the call (timeout, stream ended, crash):
    /// the store sees the reset (its orphan guard).
    Reset,
    /// A copy the network made: its answer goes nowhere, unseen.
    Copy,
}

/// A request on its way to, or waiting at, the lease-store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// The proxy that sent it.
    pub proxy: u8,
    /// Which of its calls.
    pub from: From,
    /// When it was sent (ms).
    pub sent_at: u64,
    /// When the proxy times it out (ms).
    pub deadline: u64,
    /// The call.
    pub call: Wire,
    /// Who reads the answer.
    pub waiter: Waiter,
    /// A fault holds it past its timeout.
    pub delayed: bool,
    /// Served, its answer lost: the proxy waits for its timeout.
    pub served: bool,
}

/// A client: one operation, retried.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// The operation (its body).
    pub op: u8,
    /// Attempts made.
    pub attempts: u8,
    /// An attempt is in progress.
    pub busy: bool,
}

/// A fault on serving a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServeFault {
    /// Served and answered.
    None,
    /// Served; the answer is lost on the way back.
    LoseAnswer,
    /// Served; the network delivered it twice (a copy stays, answered to nobody).
    Duplicate,
}

/// One step of the world.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// Time advances one tick: probes, call timeouts, every root context's tick.
    Tick,
    /// A client sends its next attempt through a proxy.
    Send {
        /// Client.
        client: u8,
        /// Proxy.
        proxy: u8,
    },
    /// Fault: a client gives up on its attempt (the stream ends).
    GiveUp {
        /// Client.
        client: u8,
    },
    /// A replica serves a request.
    Serve {
        /// The request.
        request: Request,
        /// The replica.
        replica: u8,
        /// A fault on the way.
        fault: ServeFault,
    },
    /// Fault: a request is lost.
    Lose {
        /// The request.
        request: Request,
    },
    /// Fault: a request is held past its timeout (it may still be served late).
    Delay {
        /// The request.
        request: Request,
    },
    /// A reset request the store never ran goes away.
    Drop {
        /// The request.
        request: Request,
    },
    /// The upstream answers a forwarded request.
    Upstream {
        /// Proxy.
        proxy: u8,
        /// Client.
        client: u8,
    },
    /// Fault: a proxy process dies (its outbox with it) and starts again.
    Crash {
        /// Proxy.
        proxy: u8,
    },
    /// Fault: a replica freezes.
    Freeze {
        /// Replica.
        replica: u8,
    },
    /// A frozen replica resumes.
    Resume {
        /// Replica.
        replica: u8,
    },
    /// Fault: Postgres goes down (a restart).
    DbDown,
    /// Postgres is back.
    DbUp,
    /// A replica's retention cleanup deletes a batch.
    Cleanup {
        /// Replica.
        replica: u8,
    },
    /// A replica releases an orphan claim.
    ReleaseOrphan {
        /// Replica.
        replica: u8,
    },
    /// A run whose caller went away commits late at the service (or is refused).
    Commit {
        /// The execution.
        n: u16,
    },
}

/// The state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct World {
    /// The clock (ms).
    pub now: u64,
    /// Postgres.
    pub db: Db,
    /// Lease-store replicas.
    pub replicas: Vec<Replica>,
    /// Proxies.
    pub proxies: Vec<Proxy>,
    /// Requests in flight, in canonical order.
    pub net: Vec<Request>,
    /// Clients.
    pub clients: Vec<Client>,
    /// The upstream service's ledger (`uncertain: reconcile`).
    pub service: Service,
    /// Faults still allowed.
    pub faults_left: u8,
    /// Evidence.
    pub ghost: Ghost,
}

fn id16(id: Uuid) -> u16 {
    u16::try_from(id.as_u128()).unwrap_or(u16::MAX)
}

fn uuid(claim: u16) -> Uuid {
    Uuid::from_u128(u128::from(claim))
}

impl Wire {
    fn of(call: &StoreCall, proxy: u8, params: &Params) -> Wire {
        match call {
            StoreCall::Claim { request, .. } => Wire::Claim {
                fingerprint: request.fingerprint,
                lease_ms: request.lease_ms,
                retention_ms: request
                    .retention_s
                    .map_or(params.filter.retention_s * 1000, |s| s * 1000),
                at_most_once: request.at_most_once && params.unflagged_proxy != Some(proxy),
            },
            StoreCall::Renew { request, .. } => Wire::Renew {
                claim: id16(request.claim_id),
                lease_ms: request.lease_ms,
            },
            StoreCall::Finalize { request, .. } => Wire::Settle {
                claim: id16(request.claim_id),
                settle: SettleWire::Finalize(
                    request.response.status,
                    request.response.body.clone(),
                    request.replayable,
                ),
            },
            StoreCall::Release { request, .. } => Wire::Settle {
                claim: id16(request.claim_id),
                settle: match request.release_as {
                    ReleaseAs::Cooldown => {
                        SettleWire::Cooldown(request.cooldown_ms.unwrap_or(STORE_COOLDOWN_MS))
                    }
                    ReleaseAs::Unknown => SettleWire::Unknown,
                    ReleaseAs::Forget => SettleWire::Forget,
                },
            },
            StoreCall::Reconciled { request, .. } => match request {
                ReconciledRequest::Committed {
                    fingerprint,
                    fence,
                    response,
                } => Wire::Reconciled {
                    fingerprint: *fingerprint,
                    fence: u16::try_from(*fence).unwrap_or(u16::MAX),
                    committed: Some(Recorded {
                        status: response.status,
                        headers: response.headers.clone(),
                        body: response.body.clone(),
                    }),
                },
                ReconciledRequest::Absent { fingerprint, fence } => Wire::Reconciled {
                    fingerprint: *fingerprint,
                    fence: u16::try_from(*fence).unwrap_or(u16::MAX),
                    committed: None,
                },
            },
        }
    }
}

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
    /// The world at time zero: every replica running past its start-up grace, nothing sent.
    pub fn start(params: &Params) -> World {
        World {
            now: 0,
            db: Db {
                up: true,
                ..Db::default()
            },
            replicas: (0..params.replicas)
                .map(|_| Replica::running(params.grace_ms, 0))
                .collect(),
            proxies: (0..params.proxies).map(|_| Proxy::starting()).collect(),
            net: Vec::new(),
            clients: params
                .clients
                .iter()
                .map(|c| Client {
                    op: c.op,
                    attempts: 0,
                    busy: false,
                })
                .collect(),
            service: Service::default(),
            faults_left: params.faults,
            ghost: Ghost::default(),
        }
    }

    /// Every step enabled now.
    pub fn steps(&self, params: &Params, out: &mut Vec<Step>) {
        if self.may_tick(params) {
            out.push(Step::Tick);
        }
        let fault = self.faults_left > 0;
        for (c, client) in self.clients.iter().enumerate() {
            let c = c as u8;
            if !client.busy && client.attempts < params.clients[usize::from(c)].attempts {
                for p in 0..self.proxies.len() {
                    out.push(Step::Send {
                        client: c,
                        proxy: p as u8,
                    });
                }
            }
            if client.busy && fault {
                out.push(Step::GiveUp { client: c });
            }
        }
        for request in &self.net {
            if !request.served {
                for (r, replica) in self.replicas.iter().enumerate() {
                    // The service answers a question (as "replica 0"), frozen or not.
                    let question = matches!(request.call, Wire::Question { .. });
                    if (replica.frozen && !question) || (question && r > 0) {
                        continue;
                    }
                    let serve = |fault| Step::Serve {
                        request: request.clone(),
                        replica: r as u8,
                        fault,
                    };
                    out.push(serve(ServeFault::None));
                    if fault && request.waiter == Waiter::Proxy {
                        out.push(serve(ServeFault::LoseAnswer));
                        out.push(serve(ServeFault::Duplicate));
                    }
                }
            }
            if request.waiter == Waiter::Proxy && !request.served && fault {
                out.push(Step::Lose {
                    request: request.clone(),
                });
                if !request.delayed {
                    out.push(Step::Delay {
                        request: request.clone(),
                    });
                }
            }
            if request.waiter != Waiter::Proxy {
                out.push(Step::Drop {
                    request: request.clone(),
                });
            }
        }
        for (p, proxy) in self.proxies.iter().enumerate() {
            for s in &proxy.streams {
                if s.upstream.is_some() {
                    out.push(Step::Upstream {
                        proxy: p as u8,
                        client: s.client,
                    });
                }
            }
            if fault {
                out.push(Step::Crash { proxy: p as u8 });
            }
        }
        for (r, replica) in self.replicas.iter().enumerate() {
            let r = r as u8;
            if replica.frozen {
                out.push(Step::Resume { replica: r });
            } else {
                if fault {
                    out.push(Step::Freeze { replica: r });
                }
                if self.db.up && !replica.orphans.is_empty() {
                    out.push(Step::ReleaseOrphan { replica: r });
                }
                let may_go = !replica.held(self.now);
                if self.db.up
                    && (self.db.expired(self.now, may_go, params)
                        || self.db.abandoned_lapse(self.now, may_go, params))
                {
                    out.push(Step::Cleanup { replica: r });
                }
            }
        }
        for &(n, _) in &self.service.orphans {
            out.push(Step::Commit { n });
        }
        if self.db.up && fault {
            out.push(Step::DbDown);
        }
        if !self.db.up {
            out.push(Step::DbUp);
        }
    }

    /// Time may pass: before the horizon, no request a replica could serve is left to
    /// time out unless a fault delays it, and no upstream run is overdue.
    fn may_tick(&self, params: &Params) -> bool {
        let next = self.now + TICK_MS;
        let some_replica = self.replicas.iter().any(|r| !r.frozen);
        // A request is served (or, once reset, dropped) within its tick unless a
        // fault delays it or no replica can take it: lateness is a fault, counted.
        let request_due = self.net.iter().any(|r| {
            !r.served
                && !r.delayed
                && (r.deadline <= next || r.waiter != Waiter::Proxy)
                && (some_replica || matches!(r.call, Wire::Question { .. }))
        });
        let upstream_due = self.proxies.iter().flat_map(|p| &p.streams).any(|s| {
            s.upstream
                .is_some_and(|(_, at)| at + params.upstream_ticks * TICK_MS <= self.now)
        });
        self.now < params.horizon_ticks * TICK_MS && !request_due && !upstream_due
    }

    /// Takes `step`.
    pub fn take(&mut self, params: &Params, step: Step) {
        match step {
            Step::Tick => self.tick(params),
            Step::Send { client, proxy } => {
                let c = &mut self.clients[usize::from(client)];
                c.busy = true;
                c.attempts += 1;
                let mut stream = Stream::new(client, c.attempts, c.op);
                let mut effects = stream.feed(&params.filter, Fed::Headers(c.op));
                effects.extend(stream.feed(&params.filter, Fed::BodyChunk(c.op)));
                self.proxies[usize::from(proxy)].streams.push(stream);
                self.effects(params, proxy, client, effects);
            }
            Step::GiveUp { client } => {
                self.faults_left -= 1;
                if let Some(p) = self.proxy_of(client) {
                    self.end_stream(params, p, client);
                }
            }
            Step::Serve {
                request,
                replica,
                fault,
            } => {
                if fault != ServeFault::None {
                    self.faults_left -= 1;
                }
                self.serve(params, request, replica, fault);
            }
            Step::Lose { request } => {
                self.faults_left -= 1;
                self.net.retain(|r| *r != request);
                let mut request = request;
                request.served = true;
                self.net.push(request);
                self.net.sort();
            }
            Step::Delay { request } => {
                self.faults_left -= 1;
                for r in &mut self.net {
                    if *r == request {
                        r.delayed = true;
                    }
                }
                self.net.sort();
            }
            Step::Drop { request } => self.net.retain(|r| *r != request),
            Step::Upstream { proxy, client } => {
                let p = usize::from(proxy);
                let Some(s) = self.proxies[p]
                    .streams
                    .iter_mut()
                    .find(|s| s.client == client)
                else {
                    return;
                };
                let Some((n, _)) = s.upstream else { return };
                if params.filter.uncertain == Uncertain::Reconcile {
                    let fence = s.fence.unwrap_or(0);
                    s.fenced = !self.service.commit(n, fence, params);
                }
                let chunk = if s.fenced { 0 } else { n };
                let mut effects = s.feed(&params.filter, Fed::ResponseHeaders);
                effects.extend(s.feed(&params.filter, Fed::ResponseChunk(chunk)));
                s.upstream = None;
                self.effects(params, proxy, client, effects);
            }
            Step::Crash { proxy } => {
                self.faults_left -= 1;
                self.ghost.crashes.push((proxy, self.now));
                let p = usize::from(proxy);
                for s in std::mem::take(&mut self.proxies[p].streams) {
                    self.clients[usize::from(s.client)].busy = false;
                    self.orphan_run(params, &s);
                }
                self.proxies[p] = Proxy::starting();
                for r in &mut self.net {
                    if r.proxy == proxy && r.waiter == Waiter::Proxy {
                        r.waiter = Waiter::Reset;
                    }
                }
                self.net.sort();
            }
            Step::Freeze { replica } => {
                self.faults_left -= 1;
                self.replicas[usize::from(replica)].frozen = true;
            }
            Step::Resume { replica } => self.replicas[usize::from(replica)].frozen = false,
            Step::DbDown => {
                self.faults_left -= 1;
                self.db.up = false;
            }
            Step::DbUp => self.db.up = true,
            Step::Cleanup { replica } => {
                let r = &mut self.replicas[usize::from(replica)];
                let may_go = !r.held(self.now);
                r.database_call(true, self.now);
                self.db.cleanup(self.now, may_go, params, &mut self.ghost);
            }
            Step::Commit { n } => {
                if let Some(i) = self.service.orphans.iter().position(|o| o.0 == n) {
                    let (n, fence) = self.service.orphans.remove(i);
                    self.service.commit(n, fence, params);
                }
            }
            Step::ReleaseOrphan { replica } => {
                let r = &mut self.replicas[usize::from(replica)];
                let (claim, release) = r.orphans.remove(0);
                r.database_call(true, self.now);
                match release {
                    OrphanRelease::GiveBack => self.db.give_back(self.now, claim, &mut self.ghost),
                    OrphanRelease::Delete => {
                        self.db.release_orphan(self.now, claim, &mut self.ghost)
                    }
                }
            }
        }
    }

    /// Under `uncertain: reconcile`, a run whose stream is gone stays with the service,
    /// which may commit it later ([`Step::Commit`]).
    fn orphan_run(&mut self, params: &Params, stream: &Stream) {
        if params.filter.uncertain == Uncertain::Reconcile
            && let Some((n, _)) = stream.upstream
        {
            self.service.orphans.push((n, stream.fence.unwrap_or(0)));
            self.service.orphans.sort();
        }
    }

    fn proxy_of(&self, client: u8) -> Option<u8> {
        self.proxies
            .iter()
            .position(|p| p.streams.iter().any(|s| s.client == client))
            .map(|p| p as u8)
    }

    fn tick(&mut self, params: &Params) {
        self.now += TICK_MS;
        let now = self.now;
        for r in self.replicas.iter_mut().filter(|r| !r.frozen) {
            // `store/probe.rs`: a probe every 500 ms feeds the grace.
            r.database_call(self.db.up, now);
        }
        let timed_out: Vec<Request> = self
            .net
            .iter()
            .filter(|r| r.waiter == Waiter::Proxy && r.deadline <= now)
            .cloned()
            .collect();
        for request in timed_out {
            self.net.retain(|r| *r != request);
            if !request.served {
                self.net.push(Request {
                    waiter: Waiter::Reset,
                    delayed: true,
                    ..request.clone()
                });
            }
            self.answer(params, &request, (None, Vec::new()));
        }
        self.net.sort();
        for p in 0..self.proxies.len() {
            let actions = self.proxies[p].outbox.0.on_tick(now);
            self.outbox_actions(params, p as u8, actions);
        }
    }

    fn serve(&mut self, params: &Params, request: Request, replica: u8, fault: ServeFault) {
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
    fn question(&mut self, params: &Params, scope: Digest, fence: u16) -> (Option<u16>, Vec<u8>) {
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

    /// Delivers `answer` to whoever sent `request` (`None` status: no answer).
    fn answer(
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

    fn outbox_actions(&mut self, params: &Params, proxy: u8, actions: Vec<OutboxAction>) {
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
    fn effects(&mut self, params: &Params, proxy: u8, client: u8, effects: Vec<Effect>) {
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
    fn send(&mut self, proxy: u8, client: u8, call: Wire, timeout_ms: u64) {
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

    fn deliver(&mut self, client: u8, status: u16, execution: Option<u16>) {
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
    fn end_stream(&mut self, params: &Params, proxy: u8, client: u8) {
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
