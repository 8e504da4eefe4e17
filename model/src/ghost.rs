//! Ghost variables: what happened, recorded as the chaos judge's evidence is
//! (`chaos/src/checker/rerun.rs`), and the properties read from it
//! (`docs/model.md#properties`).
//!
//! The judge excuses a re-run only when every condition of one row of
//! `docs/guarantee.md#where-it-is-at-least-once` is shown: the re-run won by
//! taking over the earlier fence's expired lease (every claim in between did
//! too), no settle of the earlier fence landed before that takeover, and the
//! earlier fence's proxy died after its claim and before the takeover, or its
//! outbox logged giving the claim up — and never for a hold policy's (at-most-once)
//! claim. The model adds one row the judge never meets (its records live a day): a
//! record reused after its retention.

use keyflight_protocol::Digest;

use keyflight_filter::guarantee::{self, Cause};

use crate::Uncertain;
use crate::db::{How, Row, RowState};

/// The row a claim reopened, or the row deleted before a claim inserted afresh.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Displaced {
    /// Its fence.
    pub fence: u16,
    /// Its fingerprint.
    pub fingerprint: Digest,
    /// Its state then.
    pub state: RowState,
    /// It was past its retention.
    pub past_retention: bool,
    /// It was deleted (cleanup, a `forget` release, an orphan release).
    pub deleted: bool,
    /// Its claim was at-most-once (a hold policy's).
    pub at_most_once: bool,
}

impl Displaced {
    /// The row `r` as a claim at `now` found it.
    pub fn of(r: &Row, now: u64) -> Self {
        Displaced {
            fence: r.fence,
            fingerprint: r.fingerprint,
            state: r.state,
            past_retention: r.expires_at < now,
            deleted: false,
            at_most_once: r.at_most_once,
        }
    }
}

/// A won claim, as the lease-store logs it (`claimed`, `recovered_*`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimWon {
    /// Its fence.
    pub fence: u16,
    /// Its claim id.
    pub claim_id: u16,
    /// The operation (client) that asked.
    pub op: u8,
    /// How.
    pub how: How,
    /// When (ms).
    pub at: u64,
    /// The row it took, if there was one.
    pub displaced: Option<Displaced>,
    /// Its fingerprint.
    pub fingerprint: Digest,
    /// It was at-most-once (a hold policy's, through a proxy that flags it).
    pub at_most_once: bool,
}

/// One run of the upstream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Execution {
    /// Its number (its answer's body is `e{n}`).
    pub n: u16,
    /// The operation.
    pub op: u8,
    /// The fence it ran under.
    pub fence: u16,
    /// The proxy that forwarded it.
    pub proxy: u8,
    /// When it started (ms).
    pub at: u64,
}

/// An answer a client got.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Delivered {
    /// The operation.
    pub op: u8,
    /// HTTP status.
    pub status: u16,
    /// The execution whose answer it is (`e{n}` bodies), if any.
    pub execution: Option<u16>,
    /// When (ms).
    pub at: u64,
}

/// Why a re-run is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excuse {
    /// The earlier fence's proxy died after its claim, before the takeover.
    ProxyDied,
    /// The earlier fence's outbox gave the claim up before the takeover.
    OutboxGaveUp,
    /// The earlier record was settled and past its retention.
    RetentionOver,
    /// The service's ledger answered `absent` for the earlier fence before the takeover
    /// (`uncertain: reconcile`).
    ServiceAbsent,
}

/// Everything the properties read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// Won claims, in fence order.
    pub claims: Vec<ClaimWon>,
    /// Upstream runs, in order.
    pub executions: Vec<Execution>,
    /// Answers clients got.
    pub delivered: Vec<Delivered>,
    /// (claim id, when) of the first settle that landed for a claim.
    pub landed: Vec<(u16, u64)>,
    /// The last row deleted, for the insert that follows it.
    pub deleted: Option<Displaced>,
    /// (proxy, when) of every proxy crash.
    pub crashes: Vec<(u8, u64)>,
    /// (fence, when) of every `evidence=given_up`.
    pub given_up: Vec<(u16, u64)>,
    /// (call's claim id, row's claim id): a settle that landed on another claim's row.
    pub stale_settles: Vec<(u16, u16)>,
    /// (fingerprint, fence, when) a record became `unknown`.
    pub unknown: Vec<(Digest, u16, u64)>,
    /// (fence, when) the service's ledger answered `absent` about a fence.
    pub absent_said: Vec<(u16, u64)>,
    /// (fence, committed, when) a reconciled report landed on the record.
    pub reconciled: Vec<(u16, bool, u64)>,
    /// A settle call landed through an outbox (a reachability check).
    pub outbox_landed: bool,
    /// Fences of orphan takeovers given back (`GIVE_BACK_SQL`): `failed`, but never run
    /// nor settled, so a claim that takes one over still takes over an unsettled claim.
    pub given_back: Vec<u16>,
}

impl Ghost {
    /// A claim won.
    pub fn claimed(
        &mut self,
        fence: u16,
        op: u8,
        how: How,
        at: u64,
        displaced: Option<Displaced>,
        (fingerprint, at_most_once): (Digest, bool),
    ) {
        let deleted = self.deleted.take();
        self.claims.push(ClaimWon {
            fence,
            claim_id: fence,
            op,
            how,
            at,
            displaced: displaced.or(deleted),
            fingerprint,
            at_most_once,
        });
    }

    /// A fenced settle write matched `row` for a call of `claim_id`.
    pub fn settle_landed(&mut self, claim_id: u16, row: &Row, at: u64) {
        if row.claim_id != claim_id {
            self.stale_settles.push((claim_id, row.claim_id));
        }
        if !self.landed.iter().any(|(c, _)| *c == row.claim_id) {
            self.landed.push((row.claim_id, at));
        }
    }

    /// A row was deleted.
    pub fn deleted(&mut self, row: Displaced) {
        self.deleted = Some(Displaced {
            deleted: true,
            ..row
        });
    }

    /// The re-run `later` of the same operation as `earlier`, guarded by a policy with
    /// `uncertain`, held to the judge's rules and to the guarantee's table
    /// (`keyflight_filter::guarantee`, which the judge reads too). `previous_release` is
    /// the proxy that runs a release before at-most-once leases, if one does.
    pub fn excuse(
        &self,
        earlier: &Execution,
        later: &Execution,
        (uncertain, previous_release): (Uncertain, Option<u8>),
    ) -> Result<Excuse, String> {
        let (f1, f2) = (earlier.fence, later.fence);
        if f2 <= f1 {
            return Err(format!("fence {f2} is not above {f1}"));
        }
        let between: Vec<&ClaimWon> = self
            .claims
            .iter()
            .filter(|c| c.fence > f1 && c.fence <= f2)
            .collect();
        let Some(first) = between.first() else {
            return Err(format!("no claim after fence {f1}"));
        };
        let Some(took) = first.displaced.as_ref().filter(|d| d.fence == f1) else {
            return Err(format!(
                "fence {} did not take fence {f1}'s record",
                first.fence
            ));
        };
        let absent_before = |fence: u16, at: u64| {
            self.absent_said
                .iter()
                .any(|&(f, said)| f == fence && said <= at)
        };
        if took.state != RowState::Pending {
            return if took.past_retention {
                Ok(Excuse::RetentionOver)
            } else if took.state == RowState::Failed
                && absent_before(f1, first.at)
                && guarantee::reruns(Cause::ServiceAnsweredAbsent, uncertain)
            {
                self.every_takeover_unsettled(&between[1..])
                    .map(|()| Excuse::ServiceAbsent)
            } else {
                Err(format!(
                    "fence {} reopened fence {f1}'s {:?} record within its retention",
                    first.fence, took.state
                ))
            };
        }
        // A lost proxy's operation runs again only where the table says so, or when both
        // runs came through a release before at-most-once leases
        // (`docs/operations.md#upgrades`); a claim flagged at-most-once refuses it whatever
        // the policy.
        let previous = |proxy: u8| previous_release == Some(proxy);
        let lost_proxy_reruns = guarantee::reruns(Cause::ProxyLost, uncertain)
            || (previous(earlier.proxy) && previous(later.proxy));
        if !lost_proxy_reruns && !took.past_retention {
            return Err(format!(
                "fence {} took fence {f1}'s lapsed lease over, though a lost proxy's \
                 operation never runs again under uncertain: {uncertain:?}",
                first.fence
            ));
        }
        if took.at_most_once && !took.past_retention {
            return Err(format!(
                "fence {} took over at-most-once fence {f1}'s lapsed lease",
                first.fence
            ));
        }
        // A hold policy's retry holds a lapse of its own fingerprint whoever claimed it.
        if first.at_most_once && !took.past_retention {
            return Err(format!(
                "at-most-once fence {} took over fence {f1}'s lapsed lease",
                first.fence
            ));
        }
        self.every_takeover_unsettled(&between)?;
        let died = self
            .crashes
            .iter()
            .any(|&(p, at)| p == earlier.proxy && at >= earlier.at && at <= first.at);
        if died {
            return Ok(Excuse::ProxyDied);
        }
        if self
            .given_up
            .iter()
            .any(|&(f, at)| f == f1 && at <= first.at)
        {
            return Ok(Excuse::OutboxGaveUp);
        }
        Err(format!(
            "fence {} took fence {f1}'s lease over at {} ms while its proxy {} was alive \
             and its outbox had not given it up",
            first.fence, first.at, earlier.proxy
        ))
    }

    /// Every claim of `between` took over a claim never settled: a pending one, an orphan
    /// takeover given back, or one the service's ledger answered `absent` about.
    fn every_takeover_unsettled(&self, between: &[&ClaimWon]) -> Result<(), String> {
        match between.iter().find(|c| {
            c.displaced.as_ref().is_none_or(|d| {
                d.state != RowState::Pending
                    && !self.given_back.contains(&d.fence)
                    && !(d.state == RowState::Failed
                        && self
                            .absent_said
                            .iter()
                            .any(|&(f, at)| f == d.fence && at <= c.at))
            })
        }) {
            Some(other) => Err(format!(
                "fence {} did not take over an unsettled claim",
                other.fence
            )),
            None => Ok(()),
        }
    }

    /// Property: every execution after an operation's first is excused under `policy`
    /// (its `uncertain`, and the proxy on a release before at-most-once leases).
    pub fn unexcused_rerun(&self, policy: (Uncertain, Option<u8>)) -> Option<String> {
        let ops: std::collections::BTreeSet<u8> = self.executions.iter().map(|e| e.op).collect();
        for op in ops {
            let mut runs: Vec<&Execution> = self.executions.iter().filter(|e| e.op == op).collect();
            runs.sort_by_key(|e| e.fence);
            for pair in runs.windows(2) {
                if let [a, b] = pair
                    && let Err(why) = self.excuse(a, b, policy)
                {
                    return Some(format!("e{} re-ran e{}: {why}", b.n, a.n));
                }
            }
        }
        None
    }

    /// Property: no client gets another operation's answer, nor an earlier run's
    /// answer once a later run of its operation started.
    pub fn inconsistent_answer(&self) -> Option<String> {
        for d in &self.delivered {
            let Some(n) = d.execution else { continue };
            let Some(run) = self.executions.iter().find(|e| e.n == n) else {
                return Some(format!("an answer names e{n}, which never ran"));
            };
            if run.op != d.op {
                return Some(format!("op {} got op {}'s answer e{n}", d.op, run.op));
            }
            if let Some(later) = self
                .executions
                .iter()
                .find(|e| e.op == d.op && e.fence > run.fence && e.at < d.at)
            {
                return Some(format!(
                    "e{n}'s answer was delivered at {} ms, after e{} started",
                    d.at, later.n
                ));
            }
        }
        None
    }

    /// Property: nothing runs after its record became `unknown` (no operator here), unless
    /// the service's ledger answered `absent` about that run in between.
    pub fn ran_after_unknown(&self) -> Option<String> {
        self.unknown.iter().find_map(|&(fp, fence, at)| {
            self.executions
                .iter()
                .find(|e| {
                    e.at > at
                        && self.fingerprint_of(e.fence) == Some(fp)
                        && !self
                            .absent_said
                            .iter()
                            .any(|&(f, said)| f == fence && said >= at && said <= e.at)
                })
                .map(|e| format!("e{} ran after the record became unknown at {at} ms", e.n))
        })
    }

    /// Property: the service committed no two effects of one operation (the model's one
    /// scope): no fence ran while an earlier one could still commit. A record taken after
    /// its retention is excused (`docs/reconcile.md#limits`). `committed` is the ledger's
    /// (fence, execution).
    pub fn committed_twice(&self, committed: &[(u16, u16)]) -> Option<String> {
        let run = |n: u16| self.executions.iter().find(|e| e.n == n);
        committed.iter().enumerate().find_map(|(i, &(f1, n1))| {
            committed[i + 1..].iter().find_map(|&(f2, n2)| {
                let (a, b) = (run(n1)?, run(n2)?);
                let (a, b) = if f1 <= f2 { (a, b) } else { (b, a) };
                let reused = self
                    .claims
                    .iter()
                    .find(|c| c.fence > a.fence && c.fence <= b.fence)
                    .and_then(|c| c.displaced.as_ref())
                    .is_some_and(|d| d.fence == a.fence && d.past_retention);
                (!reused).then(|| {
                    format!(
                        "the service committed e{} at fence {} and e{} at fence {}",
                        a.n, a.fence, b.n, b.fence
                    )
                })
            })
        })
    }

    fn fingerprint_of(&self, fence: u16) -> Option<Digest> {
        self.claims
            .iter()
            .find(|c| c.fence == fence)
            .map(|c| c.fingerprint)
    }

    /// Property: a claim took another fingerprint's record only past its retention.
    pub fn conflict_taken(&self) -> Option<String> {
        self.claims.iter().find_map(|c| {
            let d = c.displaced.as_ref()?;
            (!d.deleted && d.fingerprint != c.fingerprint && !d.past_retention).then(|| {
                format!(
                    "fence {} took fence {}'s record of another request within its retention",
                    c.fence, d.fence
                )
            })
        })
    }
}
