//! The lease-store callout settings ([`LeaseStore`]) and where its bearer token comes
//! from ([`TokenSource`]): the VM environment wins over the deprecated inline token, settled
//! once at `on_configure`, never per call.

use std::time::Duration;

use super::{ConfigError, MIB};

/// The lease-store callout settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStore {
    /// Envoy cluster for `dispatch_http_call`.
    pub cluster: String,
    /// `:authority` of callouts.
    pub authority: String,
    /// Bearer token for `/v1`: after [`LeaseStore::take_token_from`], the VM environment's
    /// (`token_env`) or, deprecated, the plugin configuration's; `None` sends none (the
    /// store authenticates the mesh identity), `docs/configuration.md#caller-identity`.
    pub token: Option<String>,
    /// The VM environment variable the token is read from.
    pub token_env: String,
    /// Per-call timeout (long-polls add the follower wait).
    pub timeout: Duration,
    /// The largest request body the lease-store accepts (its
    /// `--max-body-bytes`): a finalize carries the response base64-encoded.
    pub max_body_bytes: u64,
    /// Send the claims (finalizes) a worker's streams make in one event-loop turn as one
    /// batch (`docs/stream-machine.md#coalesced-calls`); on unless set to `false`.
    pub coalesce_calls: bool,
}

/// Default body limit of the lease-store (its `--max-body-bytes`).
pub const DEFAULT_STORE_MAX_BODY_BYTES: u64 = 8 * MIB;

/// The VM environment variable the lease-store token is read from when the configuration
/// names none (`lease_store.token_env`).
pub const DEFAULT_TOKEN_ENV: &str = "KEYFLIGHT_STORE_TOKEN";

/// Where the lease-store token came from, for the one line `on_configure` logs about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// The VM's environment: not in the plugin configuration, nor in `config_dump`'s copy.
    Environment,
    /// The VM's environment, and an inline `lease_store.token` ignored beside it.
    EnvironmentInlineIgnored,
    /// The deprecated inline `lease_store.token`, printed by every `config_dump`.
    Inline,
    /// None: callouts carry no bearer token.
    None,
}

impl LeaseStore {
    /// Settles the token once the VM environment's value of `token_env` is known: it wins
    /// over an inline token, which is deprecated (`docs/configuration.md#caller-identity`).
    pub fn take_token_from(&mut self, env: Option<String>) -> Result<TokenSource, ConfigError> {
        match (env, &self.token) {
            (Some(value), inline) => {
                if !is_token_text(&value) {
                    return Err(ConfigError::new(
                        "lease_store.token_env",
                        format!(
                            "the VM environment variable {} must be non-empty visible ASCII",
                            self.token_env
                        ),
                    ));
                }
                let source = match inline {
                    Some(_) => TokenSource::EnvironmentInlineIgnored,
                    None => TokenSource::Environment,
                };
                self.token = Some(value);
                Ok(source)
            }
            (None, Some(_)) => Ok(TokenSource::Inline),
            (None, None) => Ok(TokenSource::None),
        }
    }
}

/// A bearer token's text: non-empty visible ASCII.
pub(super) fn is_token_text(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}
