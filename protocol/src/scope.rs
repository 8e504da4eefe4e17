//! K3: the scope digest, keyflight's cache key.
//!
//! `scope = SHA-256(framed(domain tag, principal, authority, [method,
//! path+query], key))`. The principal is part of the preimage, so one caller's
//! record can never be served to another: crossing principals is impossible by
//! construction, not by a check someone could forget.
//!
//! The path and query enter in the same RFC 3986 normal form as the fingerprint
//! (K4). A scope must never tell apart two requests the fingerprint calls equal:
//! a retry that merely reorders its query would otherwise get a fresh scope and
//! run a second time. (A scope that is too coarse is safe: the fingerprint
//! turns the collision into a 409.)

use crate::IdempotencyKey;
use crate::digest::Digest;
use crate::framing::FramedHasher;
use crate::uri;

const DOMAIN_TAG_ROUTE: &str = "keyflight/scope/v1/route";
const DOMAIN_TAG_SERVICE: &str = "keyflight/scope/v1/service";

/// What a key is unique within (F12 policy `scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScopeMode {
    /// Per principal, authority, method and path+query (default; seed 000).
    #[default]
    Route,
    /// Per principal and authority only (seed 004): the same key on another
    /// route is a conflict, caught by the fingerprint.
    Service,
}

/// Who the request is for (K2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal<'a> {
    /// An authenticated principal (actor if present, else the caller).
    Named(&'a str),
    /// Policy `anonymous: shared`: every unauthenticated caller shares one scope.
    AnonymousShared,
}

/// The fields a scope is computed from.
#[derive(Debug, Clone, Copy)]
pub struct ScopeInput<'a> {
    /// The effective principal.
    pub principal: Principal<'a>,
    /// The request's `:authority` (host), lowercased by the caller's HTTP stack.
    pub authority: &'a str,
    /// The request method.
    pub method: &'a str,
    /// Path and query as received; normalized as in K4 before hashing.
    pub path_and_query: &'a str,
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
        Principal::Named(name) => h.field(b"named").field(name.as_bytes()),
        Principal::AnonymousShared => h.field(b"anonymous"),
    };
    h.field(input.authority.as_bytes());
    if input.mode == ScopeMode::Route {
        let (path, query) = uri::normalize(input.path_and_query);
        h.field(input.method.as_bytes()).field(path.as_bytes());
        h.count(query.len());
        for (name, value) in &query {
            h.field(name.as_bytes()).field(value.as_bytes());
        }
    }
    h.field(input.key.as_str().as_bytes());
    h.finish()
}
