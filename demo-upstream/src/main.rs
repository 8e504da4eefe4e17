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
//! in Postgres, committed with the operation's `keyflight-effects` record (`effects.rs`), and
//! the service answers keyflight's reconcile question from that ledger, logging each answer
//! (`GET /effects/ledger`).
//! See `app.rs` for the routes.

mod app;
mod connection;
mod effects;
mod executions;
mod gates;
mod reconciliations;
mod stats;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
    /// With `--effects-database-url`, the service also answers keyflight's reconcile question
    /// (`POST /.well-known/keyflight/reconcile`, `docs/effects.md#reconciliation`); this file
    /// holds the bearer token keyflight's filter sends there (one line). Without it the
    /// endpoint asks no credential: only keyflight's proxies must be able to reach it.
    #[arg(
        long,
        env = "DEMO_UPSTREAM_RECONCILE_TOKEN_FILE",
        requires = "effects_database_url"
    )]
    reconcile_token_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let cli = Cli::parse();
    let token = cli
        .reconcile_token_file
        .as_deref()
        .map(read_token)
        .transpose()?;
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

    let mut app = app::router(state.clone());
    if let Some(ledger) = &state.ledger {
        app = app.merge(keyflight_effects::reconcile::route(
            ledger.reconcile_endpoint(token, state.reconciliations.clone()),
        ));
    }
    let app = app.into_make_service_with_connect_info::<connection::Connection>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown(state))
        .await
}

/// The reconcile token in `path`: its one line, which must not be empty.
fn read_token(path: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("--reconcile-token-file {}: {e}", path.display()),
        )
    })?;
    let token = text.trim_end_matches(['\r', '\n']);
    if token.is_empty() {
        return Err(std::io::Error::other(format!(
            "--reconcile-token-file {}: empty",
            path.display()
        )));
    }
    Ok(token.to_owned())
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
