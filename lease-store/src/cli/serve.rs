//! `lease-store serve`: the HTTP API, its background tasks and their shutdown.
//!
//! Start-up order matters: settings are validated first (a missing token
//! stops the process before it touches anything), then optional migrations,
//! then the pool (which connects lazily, so a database that is down at start
//! only makes `/readyz` fail), the `LISTEN` fan-out and clean-up, and finally
//! the listener. Shutdown runs the other way: stop accepting, let long-polls
//! answer, drain requests, then wait for clean-up to stop.

use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::auth::Auth;
use crate::cleanup;
use crate::config::ServeArgs;
use crate::longpoll::LongPoll;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::store::{self, Store};

use super::CliError;

/// Serves until SIGTERM or SIGINT, then drains and returns.
pub async fn run(args: ServeArgs) -> Result<(), CliError> {
    let config = args.into_config()?;
    if config.migrate {
        let report = store::migrate(&config.store.database_url).await?;
        tracing::info!(%report, "migrations applied");
    }
    let store = Store::connect(&config.store).await?;
    let shutdown = Shutdown::new();
    let metrics = Metrics::new();
    let longpoll = LongPoll::start(&config.store.database_url, shutdown.subscribe());
    let cleanup = cleanup::spawn(
        store.clone(),
        config.cleanup,
        {
            let metrics = metrics.clone();
            move |rows| metrics.ttl_deleted(rows)
        },
        shutdown.subscribe(),
    );
    let app = api::router(
        AppState {
            store,
            longpoll,
            metrics,
            max_wait: config.max_wait,
        },
        Auth::new(config.tokens),
        config.max_body_bytes,
    );
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| CliError::Bind {
            addr: config.listen,
            source,
        })?;
    tracing::info!(listen = %config.listen, "lease-store serving");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.on_signal().await })
        .await
        .map_err(CliError::Serve)?;
    if let Err(e) = cleanup.await {
        tracing::error!(error = %e, "retention clean-up task ended abnormally");
    }
    tracing::info!("lease-store stopped");
    Ok(())
}
