//! What may happen next: every step of the world, and which are enabled in a state.

use crate::{Params, TICK_MS};

use super::wire::Wire;
use super::{Request, ServeFault, Waiter, World};

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

impl World {
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
}
