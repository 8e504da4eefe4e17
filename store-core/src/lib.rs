//! The lease-store's rules as pure code, the way `keyflight-filter` holds the filter's: the
//! decisions around its statements, with time passed in as milliseconds of the caller's
//! clock. The lease-store binds them to Postgres and its clock; the model checker
//! (`docs/model.md`) runs the same code, so a change here is checked there too.

pub mod answer;
pub mod grace;
pub mod orphan;
pub mod routed;
pub mod session;
pub mod sql;
