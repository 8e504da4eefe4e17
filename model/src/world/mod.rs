//! The world the checker explores: proxies running the real filter code, lease-store
//! replicas, the database, the network between them, the upstream and the clients,
//! and every step any of them (or a fault) can take (`docs/model.md`).

mod delivery;
mod serve;
mod steps;
mod wire;

use keyflight_store_core::orphan::OrphanRelease;

use crate::db::Db;
use crate::ghost::Ghost;
use crate::proxy::{Fed, Proxy, Stream};
use crate::replica::Replica;
use crate::service::Service;
use crate::{Params, TICK_MS, Uncertain};

pub use steps::Step;
pub use wire::{SettleWire, Wire};

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
}
