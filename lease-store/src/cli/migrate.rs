//! `lease-store migrate`: apply pending migrations, grant the runtime role, print the report.
//!
//! Rolling deploys run this as a one-off job before new replicas start, so
//! `serve` does not migrate by default (`serve --migrate` does, for demos and
//! single-replica setups). Migrations are forward-only (L3). The job runs as the schema
//! owner; with `--grant-runtime ROLE` it then gives the role `serve` runs as exactly the
//! rights this release's statements need (`docs/threat-model.md#the-database-roles`), every
//! release again, so a release that uses a new object brings its grant. With partitions it
//! migrates each of them, then installs their router (`store/partitions.rs`).

use crate::settings::{MigrateArgs, MoveSlotArgs};
use crate::store;

use super::CliError;

/// Runs the migrations, then the grants, and prints what was done.
pub async fn run(args: MigrateArgs) -> Result<(), CliError> {
    let url = &args.database.database_url;
    let partitions = &args.database.partition_urls;
    if !partitions.is_empty() {
        let runtime = args.grant_runtime.map(|role| store::RuntimeRole {
            role,
            password: args.runtime_password,
        });
        let report = store::migrate_partitioned(url, partitions, runtime.as_ref()).await?;
        println!("{report}");
        if let Some(runtime) = runtime {
            println!(
                "granted the runtime role {} what serving needs on every partition; the \
                 router connects to them as it",
                runtime.role
            );
        }
        return Ok(());
    }
    let report = store::migrate(url).await?;
    println!("{report}");
    if let Some(role) = &args.grant_runtime {
        store::grant_runtime(url, role).await?;
        println!("granted the runtime role {role} what serving needs, and nothing more");
    }
    Ok(())
}

/// `lease-store move-slot`: moves one slot of a partitioned database to another partition
/// (`docs/distributed-sql.md#adding-a-partition`), and prints what it did.
pub async fn move_slot(args: MoveSlotArgs) -> Result<(), CliError> {
    let (router, partitions) = (&args.database.database_url, &args.database.partition_urls);
    if partitions.is_empty() {
        return Err(CliError::Store(store::StoreError::Invalid(
            "move-slot needs the partitions (--partition-url, once each)".into(),
        )));
    }
    let report = store::move_slot(router, partitions, args.slot, args.to, args.drain).await?;
    println!("{report}");
    Ok(())
}
