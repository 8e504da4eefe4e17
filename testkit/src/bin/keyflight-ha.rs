//! `keyflight-ha`: runs a replicated Postgres that fails over (etcd + two Patroni nodes,
//! `keyflight_testkit::ha::HaCluster`) in the foreground, for `make up HA=1`.
//!
//! It starts the cluster on the given ports, creates the database, writes the multi-host URL
//! to `--url-file` (the lease-store's `KEYFLIGHT_DATABASE_URL`) and then waits:
//! - `SIGUSR1`: kill the primary's node (agent, postmaster, every server process), wait for
//!   Patroni to promote the standby and print the failover's timings;
//! - `SIGUSR2`: start every killed node again (it rejoins as a standby);
//! - `SIGTERM` / `SIGINT`: stop everything and remove the cluster's directory.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use keyflight_testkit::ha::{HaCluster, HaOptions, HaPorts, NODES};
use tokio::signal::unix::{SignalKind, signal};

/// How long a failover or a rejoin may take before the command gives up on it.
const FAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Command-line arguments.
#[derive(Parser)]
#[command(
    about = "A replicated Postgres that fails over (etcd + two Patroni nodes), in the foreground"
)]
struct Args {
    /// etcd's client and peer ports.
    #[arg(long, num_args = 2, value_names = ["CLIENT", "PEER"], default_values_t = [2379, 2380])]
    etcd_ports: Vec<u16>,
    /// The two Postgres nodes' ports.
    #[arg(long, num_args = 2, value_names = ["NODE0", "NODE1"], default_values_t = [54329, 54330])]
    postgres_ports: Vec<u16>,
    /// The two Patroni REST API ports.
    #[arg(long, num_args = 2, value_names = ["NODE0", "NODE1"], default_values_t = [8008, 8009])]
    rest_ports: Vec<u16>,
    /// The database to create for the lease-store.
    #[arg(long, default_value = "keyflight")]
    database: String,
    /// Where to write the multi-host URL once the cluster is up.
    #[arg(long)]
    url_file: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let pair = |ports: &[u16]| -> [u16; NODES] { [ports[0], ports[1]] };
    let ports = HaPorts {
        etcd_client: args.etcd_ports[0],
        etcd_peer: args.etcd_ports[1],
        postgres: pair(&args.postgres_ports),
        rest: pair(&args.rest_ports),
    };
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut kill_primary = signal(SignalKind::user_defined1())?;
    let mut restart = signal(SignalKind::user_defined2())?;

    let cluster = HaCluster::start(HaOptions {
        ports: Some(ports),
        ..HaOptions::default()
    })
    .await;
    create_database(&cluster.url(), &args.database).await?;
    std::fs::write(
        &args.url_file,
        format!("{}\n", cluster.url_for(&args.database)),
    )?;
    println!(
        "replicated Postgres up: {}",
        cluster.url_for(&args.database)
    );
    println!("members: {:?}", cluster.members().await);

    let mut killed = Vec::new();
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = kill_primary.recv() => {
                let failover = cluster.fail_primary_node(FAULT_TIMEOUT).await;
                println!("failover: {failover}");
                killed.push(failover.old_leader);
            }
            _ = restart.recv() => {
                for node in killed.drain(..) {
                    cluster.restart_node(node).await;
                    println!("node {node} is back");
                }
                println!("members: {:?}", cluster.members().await);
            }
        }
    }
    println!("stopping the replicated Postgres");
    drop(cluster);
    Ok(())
}

/// Creates `database` unless it exists.
async fn create_database(url: &str, database: &str) -> Result<(), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(connection);
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&database])
        .await?
        .is_some();
    if !exists {
        let quoted = format!("\"{}\"", database.replace('"', "\"\""));
        client
            .batch_execute(&format!("CREATE DATABASE {quoted}"))
            .await?;
    }
    drop(client);
    driver.abort();
    Ok(())
}
