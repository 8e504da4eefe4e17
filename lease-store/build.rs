//! Rebuilds the lease-store when a migration is added or changed: `embed_migrations!`
//! (`src/store/migrate.rs`) reads `migrations/` at compile time, which cargo does not
//! track by itself.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
