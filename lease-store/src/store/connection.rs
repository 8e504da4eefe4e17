//! How each connection to Postgres is set up, the pool's and the `LISTEN` one's alike: the
//! session settings every statement relies on, and the TCP bounds that drop a connection
//! to a host that is gone (`docs/failover.md`).

use std::time::Duration;

use keyflight_store_core::session::planner_options;

use super::StoreError;
use crate::db::{self, Database};

/// Idle time before the kernel probes a quiet connection (OS default: 2 h).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between two unanswered keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the kernel drops the connection (~25 s in all).
const KEEPALIVE_RETRIES: u32 = 3;
/// How long sent data may stay unacknowledged before the kernel drops the
/// connection (a host that vanished mid-request).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(25);

/// Sets TCP keepalives and `tcp_user_timeout` so the kernel drops a
/// connection to a host that stopped answering within about half a minute
/// instead of the OS default of two hours. Shared with the `LISTEN`
/// connection (`crate::longpoll`). Ignored for unix-socket connections.
pub(crate) fn tune_tcp(config: &mut tokio_postgres::Config) {
    config
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_RETRIES)
        .tcp_user_timeout(TCP_USER_TIMEOUT);
}

/// How long one host may take to accept a connection when a whole connection attempt has
/// `budget`: the budget split over the URL's hosts. tokio-postgres tries the hosts in turn,
/// each within `connect_timeout`; a host that vanished without a trace (no RST) uses up its
/// whole timeout, so with the full budget per host a dead node listed before the primary
/// would leave no time to reach it. Shared with the `LISTEN` connection (`crate::longpoll`).
pub(crate) fn per_host_connect_timeout(
    config: &tokio_postgres::Config,
    budget: Duration,
) -> Duration {
    let hosts = config
        .get_hosts()
        .len()
        .max(config.get_hostaddrs().len())
        .max(1);
    budget / u32::try_from(hosts).unwrap_or(u32::MAX)
}

/// Parses the URL (TLS included, `crate::db`) and adds the settings every pooled connection needs.
pub(super) fn pg_config(
    database_url: &str,
    statement_timeout: Duration,
) -> Result<Database, StoreError> {
    let mut database = db::parse(database_url)?;
    let config = &mut database.config;
    let session_options = format!(
        "-c statement_timeout={} {}",
        statement_timeout.as_millis(),
        planner_options()
    );
    let options = match config.get_options() {
        Some(existing) if !existing.is_empty() => format!("{existing} {session_options}"),
        _ => session_options,
    };
    config.options(&options);
    if config.get_application_name().is_none() {
        config.application_name("keyflight-lease-store");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(per_host_connect_timeout(config, statement_timeout));
    }
    tune_tcp(config);
    Ok(database)
}
