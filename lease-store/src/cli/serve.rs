//! `lease-store serve`: the HTTP API, its background tasks and their shutdown.
//!
//! Start-up order matters: settings are validated first (a missing token
//! stops the process before it touches anything), then optional migrations,
//! then the pool (which connects lazily, so a database that is down at start
//! only makes `/readyz` fail), the check of the database role's rights, the
//! `LISTEN` fan-out and clean-up, and finally the listener. Shutdown runs the other way: stop accepting, let long-polls
//! answer, drain requests, then wait for clean-up and the `LISTEN`
//! connection's task to stop.
//!
//! The drain is bounded: every store call already gives up after its answer
//! timeout, but a client that never finishes sending its request must not
//! keep the process alive either, so after [`DRAIN_LIMIT`] the server stops
//! waiting for what is still in flight.

use std::time::Duration;

use tokio::net::TcpListener;

use crate::access::{Credentials, MeshIdentity};
use crate::api::{self, AppState};
use crate::auth::Auth;
use crate::cleanup;
use crate::longpoll::LongPoll;
use crate::metrics::Metrics;
use crate::quota::Quota;
use crate::server::{self, ConnectionLimits};
use crate::settings::ServeArgs;
use crate::shares::Shares;
use crate::shutdown::Shutdown;
use crate::store::{self, Store};

use super::CliError;

/// The longest graceful shutdown waits for in-flight requests (below
/// Kubernetes' default 30 s grace period, so the exit is ours, not a SIGKILL).
const DRAIN_LIMIT: Duration = Duration::from_secs(20);

async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, CliError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| CliError::Bind { addr, source })
}

/// Checks once, before serving, that the database role cannot change the schema, its
/// history, the epoch or the audit (`docs/threat-model.md#the-database-roles`). By default an
/// over-privileged role (the owner, a superuser: demos, `--migrate`) is a warning, and a
/// database that cannot be asked yet is too (the pool connects lazily and `/readyz` reports
/// it). With `require` both stop the process: the check must pass before anything is served.
async fn check_role(store: &Store, require: bool) -> Result<(), CliError> {
    match store.excess_privileges().await {
        Ok(excess) if excess.is_empty() => {
            tracing::info!("the database role has the runtime role's rights and no more");
            Ok(())
        }
        Ok(excess) if require => Err(CliError::Privileged(excess)),
        Ok(excess) => {
            tracing::warn!(
                excess = %excess.join("; "),
                "the database role can do more than serving needs: serve as a runtime role \
                 granted by `lease-store migrate --grant-runtime` \
                 (docs/threat-model.md#the-database-roles)"
            );
            Ok(())
        }
        Err(e) if require => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "could not check the database role's privileges");
            Ok(())
        }
    }
}

/// Warns once when `--xfcc-trusted-peers` trusts more than the inbound sidecar's address:
/// every process connecting from there names any workload it likes
/// (`docs/configuration.md#caller-identity`).
fn warn_if_trusting_beyond_the_sidecar(mesh: &MeshIdentity) {
    let wider = mesh.trusted_beyond_the_sidecar();
    if !wider.is_empty() {
        let wider: Vec<String> = wider.iter().map(ToString::to_string).collect();
        tracing::warn!(
            peers = %wider.join(","),
            "--xfcc-trusted-peers trusts more than the inbound sidecar's address (127.0.0.6, ::6): \
             any process connecting from these, a kubectl port-forward included, can claim any \
             workload's identity (docs/configuration.md#caller-identity)"
        );
    }
}

/// Serves until SIGTERM or SIGINT, then drains (for at most [`DRAIN_LIMIT`]) and returns.
pub async fn run(args: ServeArgs) -> Result<(), CliError> {
    let config = args.into_settings()?;
    let credentials = Credentials::open(config.credentials)?;
    if let Some(mesh) = &credentials.mesh {
        warn_if_trusting_beyond_the_sidecar(mesh);
    }
    if config.migrate {
        let (url, partitions) = (&config.store.database_url, &config.store.partitions);
        match partitions.is_empty() {
            true => {
                let report = store::migrate(url).await?;
                tracing::info!(%report, "migrations applied");
            }
            false => {
                let report = store::migrate_partitioned(url, partitions, None).await?;
                tracing::info!(%report, "partitions migrated, router installed");
            }
        }
    }
    let store = Store::connect(&config.store).await?;
    check_role(&store, config.require_least_privilege).await?;
    let shutdown = Shutdown::new();
    let shutdown_rx_for_data = shutdown.subscribe();
    let metrics = Metrics::new(
        store.batch_sizes(),
        store.orphans_released_counter(),
        store.lapses_held_counter(),
    );
    let served_metrics = metrics.clone();
    // A partitioned database's settles are announced by its partitions, not its router.
    let announcing = match config.store.partitions.is_empty() {
        true => vec![config.store.database_url.clone()],
        false => config.store.partitions.clone(),
    };
    let (longpoll, listen_task) =
        LongPoll::start_capped(&announcing, config.waiters, shutdown.subscribe());
    let cleanup = cleanup::spawn(
        store.clone(),
        config.cleanup,
        {
            let metrics = metrics.clone();
            move |rows| metrics.ttl_deleted(rows)
        },
        shutdown.subscribe(),
    );
    let quota = Quota::new(config.quota, metrics.quota_gauges());
    let measuring = quota.spawn_measuring(store.clone(), shutdown.subscribe());
    let state_activity = longpoll.activity();
    let state = AppState {
        store,
        longpoll,
        metrics,
        max_wait: config.max_wait,
        bounds: config.records,
        namespace_transition: config.namespace_transition,
        quota,
        store_places: Shares::new(config.store.pool_size, state_activity),
    };
    let admin_open = !credentials.admin.is_empty();
    let auth = Auth::new(credentials);
    let connections = ConnectionLimits {
        header_read_timeout: config.limits.header_read_timeout,
        write_timeout: config.limits.write_timeout,
        max_connections: config.limits.max_connections,
    };
    let admin = if admin_open {
        let app = api::admin_router(
            state.clone(),
            auth.clone(),
            config.max_body_bytes,
            config.limits,
        );
        let listener = bind(config.admin_listen).await?;
        tracing::info!(listen = %config.admin_listen, "admin API serving");
        Some(tokio::spawn(server::serve(
            listener,
            app,
            connections,
            served_metrics.clone(),
            shutdown.subscribe(),
        )))
    } else {
        None
    };
    let app = api::router(state, auth, config.max_body_bytes, config.limits);
    let listener = bind(config.listen).await?;
    tracing::info!(listen = %config.listen, "lease-store serving");
    let mut stopping = shutdown.subscribe();
    let server = async move {
        server::serve(
            listener,
            app,
            connections,
            served_metrics,
            shutdown_rx_for_data,
        )
        .await;
        if let Some(admin) = admin
            && let Err(e) = admin.await
        {
            tracing::error!(error = %e, "admin listener ended abnormally");
        }
    };
    let signals = async move {
        shutdown.on_signal().await;
        // Keep the sender alive: the drain below still watches it.
        std::future::pending::<()>().await;
    };
    let drain_limit = async move {
        // The sender lives in `signals`, which never ends; should it be gone,
        // nothing is left to bound.
        if stopping.wait_for(|stopping| *stopping).await.is_err() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(DRAIN_LIMIT).await;
    };
    tokio::select! {
        () = server => {}
        () = signals => {}
        () = drain_limit => tracing::warn!(
            limit_s = DRAIN_LIMIT.as_secs(),
            "requests still in flight after the drain limit; stopping anyway"
        ),
    }
    if let Err(e) = cleanup.await {
        tracing::error!(error = %e, "retention clean-up task ended abnormally");
    }
    if let Err(e) = measuring.await {
        tracing::error!(error = %e, "storage quota task ended abnormally");
    }
    if let Err(e) = listen_task.await {
        tracing::error!(error = %e, "long-poll LISTEN task ended abnormally");
    }
    tracing::info!("lease-store stopped");
    Ok(())
}
