//! The request side: headers → body → body-digest memo → claim → edge-cache
//! read (F1, F2, F9, K1–K4; `docs/stream-machine.md#request-side`).
//!
//! On the headers the machine drops a client-sent fence and scope, finds the policy,
//! reads the request's identity (key, principal) and checks a declared
//! length; it then buffers the body, and once it has all of it computes the
//! scope and the fingerprint — a large JSON body's digest through the memo —
//! and asks for the claim, after an edge-cache read when the cache is on for
//! the policy.

use std::rc::Rc;
use std::time::Duration;

use keyflight_protocol::fingerprint::{self, BodyDigest};
use keyflight_protocol::headers::values;
use keyflight_protocol::problem::ProblemCode;
use keyflight_protocol::time::millis;
use keyflight_protocol::wire::{ClaimRequest, PreviousIdentity};
use keyflight_protocol::{RequestHead, Rules, Target};

use super::{Action, FILTER_ONLY_HEADERS, Machine, Pending, Ready, State, Who};
use crate::body_memo::{self, RawDigest};
use crate::config::{Anonymous, Mode, Unreadable};
use crate::edge_cache::{self, Lookup};
use crate::encoding::{self, Accepted};
use crate::guarantee;
use crate::identity;
use crate::metrics::{EventKind, Metric, Outcome};
use crate::problem::problem_reply;
use crate::recipe;
use crate::replay::{Unreplayable, replay};
use crate::store_call::StoreCall;

impl Machine {
    pub(super) fn request_headers(
        &mut self,
        out: &mut Vec<Action>,
        headers: &[(String, Vec<u8>)],
        (principal, previous_principal): (identity::Lookup, Option<identity::Lookup>),
        end_of_stream: bool,
    ) {
        if !matches!(self.state, State::Start) {
            return;
        }
        self.state = State::Passthrough;
        // Only the filter may tell the upstream a fence or a scope: a client-sent
        // one is dropped from every request, guarded or not.
        for name in FILTER_ONLY_HEADERS {
            if values(headers, name).next().is_some() {
                out.push(Action::SetRequestHeader {
                    name: name.to_owned(),
                    value: None,
                });
            }
        }
        let Some(target) = Target::from_headers(headers) else {
            return self.undecodable_target(out, headers);
        };
        if self.config.reserves(&target.path) {
            let detail = "this path is the service's reconcile endpoint: only keyflight asks it";
            return self.refuse_in_callback(out, ProblemCode::Forbidden, detail);
        }
        let Some(policy) = self.config.match_policy(&target).cloned() else {
            return;
        };
        let rules = Rules {
            key_header: &self.config.key_header,
            fingerprint_headers: &policy.fingerprint_headers,
        };
        let head = match RequestHead::read(target, headers, &rules) {
            Err(e) => {
                return self.refuse_in_callback(
                    out,
                    ProblemCode::IdempotencyKeyInvalid,
                    &e.to_string(),
                );
            }
            Ok(head) => head,
        };
        if head.key.is_none() {
            if policy.require_key {
                let detail = format!("this route requires the {} header", self.config.key_header);
                return self.refuse_in_callback(out, ProblemCode::IdempotencyKeyRequired, &detail);
            }
            return self.count_outcome(out, Outcome::Unguarded);
        }
        let principal = match principal {
            identity::Lookup::Refused(e) => {
                return self.refuse_in_callback(
                    out,
                    ProblemCode::PrincipalAmbiguous,
                    &e.to_string(),
                );
            }
            lookup => match (Who::found(lookup), policy.anonymous) {
                (Some(who), _) => who,
                (None, Anonymous::Shared) => Who::AnonymousShared,
                (None, Anonymous::Reject) => {
                    let detail = "a keyed request needs an authenticated principal";
                    return self.refuse_in_callback(out, ProblemCode::PrincipalRequired, detail);
                }
            },
        };
        let previous_principal =
            previous_principal.map(|lookup| match (lookup, policy.anonymous) {
                (identity::Lookup::Absent, Anonymous::Shared) => Some(Who::AnonymousShared),
                // A proxy on the previous sources refused this request (or found no
                // principal): it made no record.
                (lookup, _) => Who::found(lookup),
            });
        let declared_length =
            first_text(headers, "content-length").and_then(|v| v.trim().parse::<u64>().ok());
        if declared_length.is_some_and(|n| n > policy.max_request_body_bytes as u64) {
            return self.refuse_too_large_in_callback(out, &policy);
        }
        let accept_encoding: Vec<&[u8]> = values(headers, encoding::ACCEPT_ENCODING).collect();
        let pending = Pending {
            accepted: Accepted::from_values(&accept_encoding),
            policy,
            head,
            principal,
            previous_principal,
            buffered: 0,
        };
        if end_of_stream {
            let digested = fingerprint::body_digest(&pending.head.media_type, &[]);
            self.claim(out, pending, digested);
        } else {
            self.state = State::BufferingRequest(pending);
        }
    }

    /// A request whose `:method`, `:path` or `:authority` is not UTF-8 (or
    /// missing) cannot be matched or scoped exactly: it is counted, and
    /// refused when any policy could guard it as far as it can be read
    /// (`docs/identity.md#matching-policies`).
    fn undecodable_target(&mut self, out: &mut Vec<Action>, headers: &[(String, Vec<u8>)]) {
        out.push(Action::Count(Metric::Event(EventKind::TargetUndecodable)));
        let read = |name: &str| match headers.iter().find(|(n, _)| n == name) {
            Some((_, value)) => (
                String::from_utf8_lossy(value).into_owned(),
                std::str::from_utf8(value).is_err(),
            ),
            None => (String::new(), true),
        };
        let (method, method_unreadable) = read(":method");
        let (path, _) = read(":path");
        let (authority, authority_unreadable) = read(":authority");
        let scheme = headers
            .iter()
            .find(|(n, _)| n == ":scheme")
            .and_then(|(_, v)| std::str::from_utf8(v).ok());
        let target = Target::new(&method, &path, &authority, scheme);
        let unreadable = Unreadable {
            method: method_unreadable,
            authority: authority_unreadable,
        };
        if self.config.match_policy_read(&target, unreadable).is_some() {
            let detail = "the request's method, path or authority is not UTF-8";
            self.refuse_in_callback(out, ProblemCode::BadRequest, detail);
        }
    }

    pub(super) fn request_body_chunk(
        &mut self,
        out: &mut Vec<Action>,
        buffered: usize,
        end_of_stream: bool,
    ) {
        let State::BufferingRequest(pending) = &mut self.state else {
            return;
        };
        pending.buffered = buffered;
        if buffered > pending.policy.max_request_body_bytes {
            let policy = Rc::clone(&pending.policy);
            return self.refuse_too_large_in_callback(out, &policy);
        }
        if end_of_stream {
            out.push(Action::ReadRequestBody { size: buffered });
        }
    }

    pub(super) fn request_body_complete(&mut self, out: &mut Vec<Action>, body: Vec<u8>) {
        let pending = match std::mem::take(&mut self.state) {
            State::BufferingRequest(pending) => pending,
            other => {
                self.state = other;
                return;
            }
        };
        if body.len() > pending.policy.max_request_body_bytes {
            return self.refuse_too_large_in_callback(out, &Rc::clone(&pending.policy));
        }
        if body_memo::applies(&pending.head.media_type, body.len()) {
            let raw = RawDigest::of(&body);
            let key = body_memo::slot_key(&raw);
            out.push(Action::ReadBodyDigest { key: key.clone() });
            self.state = State::DigestLookup {
                pending,
                body,
                raw,
                key,
            };
            return;
        }
        let digested = fingerprint::body_digest(&pending.head.media_type, &body);
        self.claim(out, pending, digested);
    }

    /// The memo's slot for a large JSON body: a byte-identical body seen
    /// before is not canonicalized again; any other is, and is remembered.
    pub(super) fn body_digest_read(&mut self, out: &mut Vec<Action>, slot: Option<&[u8]>) {
        let (pending, body, raw, key) = match std::mem::take(&mut self.state) {
            State::DigestLookup {
                pending,
                body,
                raw,
                key,
            } => (pending, body, raw, key),
            other => {
                self.state = other;
                return;
            }
        };
        let digested = match body_memo::lookup(slot, &raw) {
            Some(remembered) => {
                out.push(Action::Count(Metric::Event(
                    EventKind::BodyDigestRemembered,
                )));
                remembered
            }
            None => {
                let digested = fingerprint::body_digest(&pending.head.media_type, &body);
                out.push(Action::WriteBodyDigest {
                    key,
                    value: body_memo::encode(&raw, digested),
                });
                digested
            }
        };
        self.claim(out, pending, digested);
    }

    pub(super) fn claim(&mut self, out: &mut Vec<Action>, pending: Pending, body: BodyDigest) {
        let policy = pending.policy;
        let (scope, fingerprint) =
            pending
                .head
                .identify_digested(pending.principal.principal(), policy.scope, body);
        // The head was read with a key (request_headers returned otherwise).
        let Some(scope) = scope else {
            return;
        };
        let previous_scope = recipe::previous_scope(
            &pending.head,
            scope,
            policy.previous.as_ref().map_or(policy.scope, |p| p.scope),
            match &pending.previous_principal {
                None if policy.previous.is_none() => None,
                None => Some(pending.principal.principal()),
                Some(who) => who.as_ref().map(Who::principal),
            },
        );
        // F11: dry_run never holds a request up, so it never long-polls.
        let follower_wait = match self.config.mode {
            Mode::Enforce => policy.follower_wait,
            Mode::DryRun => Duration::ZERO,
        };
        let wait_ms = millis(follower_wait);
        let ready = Ready {
            call: StoreCall::Claim {
                scope,
                request: ClaimRequest {
                    fingerprint,
                    lease_ms: millis(policy.lease),
                    wait_ms: (wait_ms > 0).then_some(wait_ms),
                    retention_s: Some(policy.retention.as_secs()),
                    previous: previous_scope.map(|scope| PreviousIdentity { scope, fingerprint }),
                    // A lapsed lease of an at-most-once policy is held, not taken over
                    // (`docs/guarantee.md#at-most-once-and-at-least-once-policies`).
                    at_most_once: guarantee::at_most_once(policy.uncertain),
                },
            },
            // A long-poll may legitimately take the whole follower wait (F5).
            timeout: self.config.lease_store.timeout + follower_wait,
            scope,
            previous_scope,
            fingerprint,
            accepted: pending.accepted,
            policy,
        };
        match self.config.edge_cache_for(&ready.policy) {
            // F9: a hot replay needs no lease-store call; the slot is read
            // first and the answer comes back as `EdgeCacheRead`.
            Some((cache, _)) => {
                out.push(Action::ReadEdgeCache {
                    key: edge_cache::slot_key(&ready.scope, cache.slots),
                });
                self.state = State::CacheLookup(ready);
            }
            None => self.call_claim(out, ready),
        }
    }

    /// Sends the claim. The state keeps it: under `uncertain: reconcile` an `unknown`
    /// record the service answered `absent` for is claimed again with it.
    pub(super) fn call_claim(&mut self, out: &mut Vec<Action>, ready: Ready) {
        out.push(Action::CallStore {
            call: ready.call.clone(),
            timeout: ready.timeout,
        });
        self.state = State::Claiming(ready);
    }

    /// F9: a completed record with the same fingerprint replays from the edge
    /// cache, another fingerprint is a certain conflict, anything else claims.
    /// Never in `dry_run` (the cache is off there), so a hit always replies.
    pub(super) fn edge_cache_read(
        &mut self,
        out: &mut Vec<Action>,
        slot: Option<&[u8]>,
        now_ms: u64,
    ) {
        let ready = match std::mem::take(&mut self.state) {
            State::CacheLookup(ready) => ready,
            other => {
                self.state = other;
                return;
            }
        };
        let lookup = match self.cache_epoch {
            Some(epoch) => {
                edge_cache::lookup(slot, &ready.scope, &ready.fingerprint, now_ms, epoch)
            }
            // No recent word from the store on erasures: the cache may be stale.
            None => Lookup::Miss,
        };
        match lookup {
            Lookup::Miss => self.call_claim(out, ready),
            Lookup::Hit(response) => match replay(&ready.policy, response, &ready.accepted) {
                Ok(reply) => self.reply_to_held_request(out, reply, Outcome::ReplayEdgeCache),
                Err(Unreplayable::Encoded(coding)) => self.not_decodable(out, &coding),
                Err(Unreplayable::Malformed) => self.call_claim(out, ready),
            },
            Lookup::Conflict => {
                let code = ProblemCode::IdempotencyConflict;
                let status = ready.policy.status_of(code, self.config.status_profile);
                let reply = problem_reply(code, status, code.title(), None);
                self.reply_to_held_request(out, reply, Outcome::Conflict);
            }
        }
    }
}

/// The first value of header `name`, if it is UTF-8.
fn first_text(headers: &[(String, Vec<u8>)], name: &str) -> Option<String> {
    values(headers, name)
        .next()
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned)
}
