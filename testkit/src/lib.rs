//! Test support for keyflight: throwaway Postgres clusters (single and replicated with
//! failover) and supervised child processes.

pub mod ha;
mod os;
pub mod pg;
pub mod process;
