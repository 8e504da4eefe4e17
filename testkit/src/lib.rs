//! Test support for keyflight: throwaway Postgres clusters (single and replicated with
//! failover, and the [`database::Database`] a stack runs on) and supervised child processes.

pub mod database;
pub mod ha;
mod os;
pub mod pg;
pub mod pki;
pub mod process;
