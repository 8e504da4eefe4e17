//! `lease-store migrate`: apply pending migrations and print the report.
//!
//! Rolling deploys run this as a one-off job before new replicas start, so
//! `serve` does not migrate by default (`serve --migrate` does, for demos and
//! single-replica setups). Migrations are forward-only (L3).

use crate::config::DatabaseArgs;
use crate::store;

use super::CliError;

/// Runs the migrations and prints what was applied.
pub async fn run(args: DatabaseArgs) -> Result<(), CliError> {
    let report = store::migrate(&args.database_url).await?;
    println!("{report}");
    Ok(())
}
