//! demo upstream.
fn main() {}
