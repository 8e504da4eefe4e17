//! lease-store binary (built in the foundation issue).
fn main() {}
