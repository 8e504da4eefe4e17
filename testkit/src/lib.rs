//! Test support for keyflight: throwaway Postgres clusters and supervised child processes.

pub mod pg;
pub mod process;
