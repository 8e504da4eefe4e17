//! keyflight's shared, pure core.
//!
//! Everything both sides of the wire must agree on bit for bit lives here: the
//! `Idempotency-Key` rules (K1), who a request is for (K2), the scope digest
//! that is the cache key (K3), the request fingerprint (K4), the rule for
//! recorded response headers (F8), and the lease-store API v1 wire types
//! (`docs/records.md#the-api`). [`request`] is the one path from a request's raw parts to both
//! digests, used by the edge filter and by `keyflight fingerprint` alike.
//! The crate performs no I/O and reads no clock, so the same code runs in the
//! proxy-wasm filter (`wasm32-wasip1`), in the lease-store on the host, and in
//! the `wasm-bindgen-test` vectors that prove the two builds agree.

pub mod authority;
pub mod digest;
pub mod fingerprint;
pub mod framing;
pub mod headers;
pub mod json;
pub mod key;
pub mod media_type;
pub mod principal;
pub mod problem;
pub mod request;
pub mod scope;
pub mod target;
pub mod time;
mod uri;
pub mod wire;

pub use digest::Digest;
pub use fingerprint::{FingerprintInput, fingerprint};
pub use key::{IdempotencyKey, KeyError};
pub use principal::{Party, Principal, PrincipalError, PrincipalSource};
pub use problem::ProblemCode;
pub use request::{Identified, RequestHead, Rules};
pub use scope::{ScopeInput, ScopeMode, scope};
pub use target::Target;
