//! The live credentials (L7), built from the settings ([`crate::settings`]): the filter's
//! token set, the mesh identity with its workload allowlist, and the operators' tokens,
//! each re-reading its file when it changes through the one [`watched_file`]
//! (`docs/configuration.md#caller-identity`, `docs/records.md#operators`).

pub mod admin_tokens;
pub mod mesh;
pub mod token_set;
pub mod watched_file;
pub mod workloads;

use std::sync::Arc;

use crate::settings::{ConfigError, CredentialSettings};

pub use admin_tokens::AdminTokens;
pub use mesh::MeshIdentity;
pub use token_set::TokenSet;
pub use workloads::Allowlist;

/// Who may call what: the filter's credentials and the operators' named tokens.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// Tokens for `/v1/claims…`, when a bearer token is required there.
    pub filter: Option<Arc<TokenSet>>,
    /// The callers' mesh identity, when the store trusts its sidecar's XFCC.
    pub mesh: Option<Arc<MeshIdentity>>,
    /// Operators' tokens for `/v1/records…`; empty disables the admin API.
    pub admin: Arc<AdminTokens>,
}

impl Credentials {
    /// The credentials `settings` name, their files read now: a file that cannot be used,
    /// or an admin token equal to a filter token, fails the start.
    pub fn open(settings: CredentialSettings) -> Result<Self, ConfigError> {
        let filter = settings.filter.map(TokenSet::open).transpose()?;
        let mesh = settings.mesh.map(MeshIdentity::open).transpose()?;
        let admin = AdminTokens::open(settings.admin)?;
        if filter
            .as_ref()
            .is_some_and(|set| set.overlaps(|token| admin.contains(token)))
        {
            return Err(ConfigError::AdminTokenReused);
        }
        Ok(Credentials {
            filter: filter.map(Arc::new),
            mesh: mesh.map(Arc::new),
            admin: Arc::new(admin),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::parse_serve;

    fn credentials(args: &[&str]) -> Result<Credentials, String> {
        let settings = parse_serve(args)?;
        Credentials::open(settings.credentials).map_err(|e| e.to_string())
    }

    #[test]
    fn by_default_only_the_inbound_sidecar_is_trusted_with_xfcc() {
        let credentials = credentials(&[
            "--database-url",
            "host=/run/pg",
            "--trust-xfcc",
            "--workload",
            "spiffe://a/b",
        ]);
        let mesh = credentials.unwrap().mesh.expect("--trust-xfcc");
        assert!(mesh.trusted_beyond_the_sidecar().is_empty());
        assert_eq!(
            mesh.trusted_peers.len(),
            crate::caller::SIDECAR_ADDRESSES.len()
        );
    }

    #[test]
    fn an_admin_token_equal_to_the_filter_token_is_refused() {
        let refused = credentials(&["--database-url", "host=/run/pg", "--admin-token", "t"])
            .expect_err("the filter token is `t` too");
        assert_eq!(
            refused,
            ConfigError::AdminTokenReused.to_string(),
            "the one-line error"
        );
    }
}
