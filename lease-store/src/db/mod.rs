//! Connecting to Postgres: the one place a database URL becomes tokio-postgres settings and a
//! TLS connector, for all three connection paths (the pool, the `LISTEN` connection,
//! migrations) and so for both subcommands that reach the database (`serve`, `migrate`).
//!
//! The URL carries libpq's TLS parameters (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`);
//! [`url`] takes them out, [`tls`] builds the rustls configuration they ask for, and the
//! connector is tokio-postgres-rustls', which also gives SCRAM-SHA-256-PLUS its channel
//! binding (`channel_binding=require` is tokio-postgres' own parameter). What each mode
//! checks, and why `serve` refuses the cleartext ones: `docs/configuration.md#tls-to-postgres`.

mod tls;
mod url;

use tokio_postgres::config::{Host, SslMode as WireSslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

pub use tls::TlsError;
pub use url::{SslMode, TlsParams, UrlError};

/// Why a database URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseUrlError {
    /// A TLS parameter is wrong.
    #[error(transparent)]
    Tls(#[from] UrlError),
    /// tokio-postgres refused the rest of the URL.
    #[error(transparent)]
    Parse(#[from] tokio_postgres::Error),
    /// A certificate or key file cannot be used.
    #[error(transparent)]
    Files(#[from] TlsError),
}

/// A parsed database URL: the settings to connect with, and the TLS connector they need.
#[derive(Clone)]
pub struct Database {
    /// tokio-postgres' settings, `sslmode` included (`verify-*` is `require` on the wire).
    pub config: tokio_postgres::Config,
    /// The connector that checks the server as the URL's `sslmode` asks.
    pub tls: MakeRustlsConnect,
    params: TlsParams,
}

/// Parses `url` and reads the certificate files it names.
pub fn parse(url: &str) -> Result<Database, DatabaseUrlError> {
    let (rest, params) = url::split(url)?;
    let mut config: tokio_postgres::Config = rest.parse()?;
    config.ssl_mode(match params.mode {
        SslMode::Disable => WireSslMode::Disable,
        SslMode::Prefer => WireSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireSslMode::Require,
    });
    let tls = MakeRustlsConnect::new(tls::client_config(&params)?);
    Ok(Database {
        config,
        tls,
        params,
    })
}

/// The `sslmode` of `url` when it lets a TCP connection run in cleartext: `disable`, and
/// `prefer` (libpq's default) against a server, or an attacker, that declines TLS. `None`
/// when every connection is TLS or over a Unix socket, and when the URL does not parse
/// (connecting says why). Pure: reads no certificate file.
pub fn cleartext_mode(url: &str) -> Option<SslMode> {
    let (rest, params) = url::split(url).ok()?;
    let config: tokio_postgres::Config = rest.parse().ok()?;
    let cleartext = matches!(params.mode, SslMode::Disable | SslMode::Prefer);
    (cleartext && over_tcp(&config)).then_some(params.mode)
}

/// Whether a connection with `config` may go over TCP (a Unix socket carries no TLS).
fn over_tcp(config: &tokio_postgres::Config) -> bool {
    config
        .get_hosts()
        .iter()
        .any(|host| matches!(host, Host::Tcp(_)))
}

impl Database {
    /// The URL's TLS parameters, for a connection string made from it (a PL/Proxy router's
    /// to its partitions).
    pub fn tls_params(&self) -> &TlsParams {
        &self.params
    }

    /// Logs a warning, once per start, when a TCP connection to this database would not
    /// authenticate the server (cleartext, or TLS without `sslrootcert`).
    pub fn warn_if_unverified(&self) {
        if over_tcp(&self.config) && !self.params.checks_chain() {
            tracing::warn!(
                sslmode = self.params.mode.as_str(),
                "the database server is not authenticated: use sslmode=verify-full with \
                 sslrootcert (docs/configuration.md#tls-to-postgres)"
            );
        }
    }
}
