//! Who may call what, as settings (L7, `docs/configuration.md#caller-identity`): where the
//! filter's tokens, the allowed workloads and the operators' tokens come from. The live
//! sets, re-read when their files change, are built from these by [`crate::access`].

use std::path::PathBuf;
use std::sync::Arc;

use ipnet::IpNet;

use super::{ConfigError, Secret, check, files, resolve_secret};

/// Where the filter's bearer tokens come from.
#[derive(Debug, Clone)]
pub enum FilterTokens {
    /// One fixed token (`--token`).
    Inline(Secret),
    /// A file of tokens, re-read when it changes (`--token-file`).
    File(PathBuf),
}

/// Where the workloads allowed under `--trust-xfcc` come from.
#[derive(Debug, Clone)]
pub enum WorkloadList {
    /// The `--workload` ids, checked.
    Fixed(Vec<Arc<str>>),
    /// A file of ids, re-read when it changes (`--workloads-file`).
    File(PathBuf),
}

/// Whom the store believes about XFCC (`--trust-xfcc`), and whom it lets in.
#[derive(Debug, Clone)]
pub struct MeshSettings {
    /// Peers whose XFCC header is believed (the store's own sidecar).
    pub trusted_peers: Vec<IpNet>,
    /// The workloads allowed to call the data plane.
    pub workloads: WorkloadList,
}

/// The operators' tokens: the single inline one and a file of named ones.
#[derive(Debug, Clone, Default)]
pub struct AdminTokenSettings {
    /// `--admin-token`, acting as the operator `admin`.
    pub inline: Option<Secret>,
    /// `--admin-tokens-file`, re-read when it changes.
    pub file: Option<PathBuf>,
}

/// The filter's credentials and the operators' tokens.
#[derive(Debug, Clone)]
pub struct CredentialSettings {
    /// The filter's bearer tokens, when `/v1/claims…` requires one.
    pub filter: Option<FilterTokens>,
    /// The callers' mesh identity, when the store trusts its sidecar's XFCC.
    pub mesh: Option<MeshSettings>,
    /// Operators' tokens for `/v1/records…`; none disables the admin API.
    pub admin: AdminTokenSettings,
}

/// `--token` or `--token-file`, not both.
pub(super) fn filter_tokens(
    inline: Option<String>,
    file: Option<PathBuf>,
) -> Result<Option<FilterTokens>, ConfigError> {
    Ok(match (inline, file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::SecretGivenTwice {
                name: "KEYFLIGHT_TOKEN",
            });
        }
        (Some(inline), None) => Some(FilterTokens::Inline(
            resolve_secret("KEYFLIGHT_TOKEN", Some(&inline), None)?
                .ok_or(ConfigError::MissingToken)?,
        )),
        (None, Some(path)) => Some(FilterTokens::File(path)),
        (None, None) => None,
    })
}

/// The mesh identity settings of `--trust-xfcc`: at least one trusted peer, and the
/// workloads either on the command line or in a file, not both.
pub(super) fn mesh_settings(
    trusted_peers: Vec<IpNet>,
    workloads: Vec<String>,
    workloads_file: Option<PathBuf>,
) -> Result<MeshSettings, ConfigError> {
    check(
        !trusted_peers.is_empty(),
        "xfcc-trusted-peers",
        "must name the store's own sidecar",
    )?;
    let workloads = match workloads_file {
        Some(path) => {
            check(
                workloads.is_empty(),
                "workloads-file",
                "the allowlist is either --workload or --workloads-file, not both",
            )?;
            WorkloadList::File(path)
        }
        None => WorkloadList::Fixed(
            files::workload_ids(workloads.iter().map(String::as_str))
                .map_err(|reason| ConfigError::Workloads { reason })?,
        ),
    };
    Ok(MeshSettings {
        trusted_peers,
        workloads,
    })
}
