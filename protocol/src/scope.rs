//! K3: the scope digest, keyflight's cache key.
//!
//! `scope = SHA-256(framed(domain tag, principal source, principal,
//! authority, [method, path, query], key))`; a delegated principal frames its
//! subject and its actor, each with its source, under its own kind. The principal and the source that
//! named it are part of the preimage, so one caller's record can never be
//! served to another: crossing principals is impossible by construction, not
//! by a check someone could forget.
//!
//! The authority, path and query enter in the same normal form the
//! fingerprint uses (K4, [`crate::target`]). A scope must never tell apart two
//! requests the fingerprint calls equal: a retry that merely respells its
//! target would otherwise get a fresh scope and run a second time. (A scope
//! that is too coarse is safe: the fingerprint turns the collision into a 409.)

use crate::IdempotencyKey;
use crate::digest::Digest;
use crate::framing::FramedHasher;
use crate::principal::Principal;
use crate::target::Target;

const DOMAIN_TAG_ROUTE: &str = "keyflight/scope/v2/route";
const DOMAIN_TAG_SERVICE: &str = "keyflight/scope/v2/service";

/// What a key is unique within (F12 policy `scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScopeMode {
    /// Per principal, authority, method and path+query (the default;
    /// `docs/identity.md#the-scope`).
    #[default]
    Route,
    /// Per principal and authority only: the same key on another route is a
    /// conflict, caught by the fingerprint.
    Service,
}

/// The fields a scope is computed from.
#[derive(Debug, Clone, Copy)]
pub struct ScopeInput<'a> {
    /// The effective principal and its source.
    pub principal: Principal<'a>,
    /// The normalized request target (its authority always counts; its
    /// method, path and query under [`ScopeMode::Route`]).
    pub target: &'a Target,
    /// The validated key.
    pub key: &'a IdempotencyKey,
    /// Route or service scope.
    pub mode: ScopeMode,
}

/// Computes the scope digest.
pub fn scope(input: &ScopeInput<'_>) -> Digest {
    let tag = match input.mode {
        ScopeMode::Route => DOMAIN_TAG_ROUTE,
        ScopeMode::Service => DOMAIN_TAG_SERVICE,
    };
    let mut h = FramedHasher::new(tag);
    match input.principal {
        Principal::Named { source, name } => {
            h.field(b"named");
            source.frame(&mut h);
            h.field(name.as_bytes());
        }
        Principal::Delegated { subject, actor } => {
            h.field(b"delegated");
            for party in [subject, actor] {
                party.source.frame(&mut h);
                h.field(party.name.as_bytes());
            }
        }
        Principal::AnonymousShared => {
            h.field(b"anonymous");
        }
    }
    let target = input.target;
    h.field(target.authority.normalized().as_bytes());
    if input.mode == ScopeMode::Route {
        h.field(target.method.as_bytes())
            .field(target.path.as_bytes());
        h.count(target.query.len());
        for (name, value) in &target.query {
            h.field(name.as_bytes()).field(value.as_bytes());
        }
    }
    h.field(input.key.as_str().as_bytes());
    h.finish()
}

/// The domain tag of a record scope's preimage (`docs/configuration.md#caller-identity`).
const RECORD_SCOPE_TAG: &str = "keyflight/v1/workload-record-scope";

/// The record scope of `scope` named by the workload `spiffe_id`, as a lease-store that
/// trusts the mesh identity keeps it (`docs/configuration.md#caller-identity`): the
/// length-framed SHA-256 of (tag, id, scope), so no two (id, scope) pairs share a record and
/// none equals a scope as sent (that would take a SHA-256 collision).
pub fn record_scope(spiffe_id: &str, scope: &Digest) -> Digest {
    let mut hasher = FramedHasher::new(RECORD_SCOPE_TAG);
    hasher.field(spiffe_id.as_bytes()).field(&scope.0);
    hasher.finish()
}
