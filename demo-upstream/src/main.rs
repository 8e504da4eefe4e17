//! `demo-upstream`: a tiny payments service that sits behind Envoy in the demo and the
//! end-to-end tests.
//!
//! It does nothing useful on purpose. What it offers is observability of the one thing
//! keyflight promises: how many times a request actually ran. Every `POST /payments…`
//! counts an execution the moment its handler starts (`GET /stats`), and a request can be
//! parked at a named gate (`?hold=NAME`) until a test opens it, so tests synchronize on
//! "the winner is running" instead of sleeping, and a request can make it drop the
//! connection after its side effect (`?abort=NAME`). Every execution is also logged with
//! its idempotency key and fence (`GET /executions`), for fault-injection runs that must
//! say which operation ran twice. With `--effects-database-url` each payment is also a row
//! in Postgres, committed with the operation's `keyflight-effects` record (`effects.rs`).
//! See `app.rs` for the routes.

mod app;
mod connection;
mod effects;
mod executions;
mod gates;
mod stats;

use std::net::SocketAddr;

use clap::Parser;
use tokio::net::TcpListener;

/// Command-line settings.
#[derive(Debug, Parser)]
#[command(name = "demo-upstream", about = "keyflight's demo payments upstream")]
struct Cli {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "DEMO_UPSTREAM_LISTEN", default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// Keep each payment as a row in this Postgres database, committed with its
    /// `keyflight-effects` record (`docs/effects.md`): a re-run answers the first run's
    /// answer instead of paying again. Off by default.
    #[arg(long, env = "DEMO_UPSTREAM_EFFECTS_DATABASE_URL")]
    effects_database_url: Option<String>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let cli = Cli::parse();
    let mut state = app::AppState::default();
    if let Some(url) = &cli.effects_database_url {
        let ledger = effects::Ledger::open(url)
            .await
            .map_err(std::io::Error::other)?;
        state.ledger = Some(ledger);
    }
    let listener = TcpListener::bind(cli.listen).await?;
    let local = listener.local_addr()?;
    println!("demo-upstream listening on {local}");
    tracing::info!(%local, "listening");

    let app =
        app::router(state.clone()).into_make_service_with_connect_info::<connection::Connection>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown(state))
        .await
}

/// Resolves on Ctrl-C or SIGTERM. Opens every gate first, so handlers parked at a gate
/// finish and the graceful shutdown does not wait on a test that will never open them.
async fn shutdown(state: app::AppState) {
    let ctrl_c = async {
        // An error here means no signal handler could be installed: then only SIGTERM stops us.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();

    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
    state.gates.open_all();
}
