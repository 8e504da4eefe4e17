//! The callers' mesh identity under `--trust-xfcc`, live: the trusted peers and the
//! allowlist, re-read when its file changes (`docs/configuration.md#caller-identity`). What
//! an XFCC header says is read by the pure functions of [`crate::caller`].

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::workloads::Allowlist;
use crate::caller::{OTHER_LABEL, Refused, SIDECAR_ADDRESSES, last_element_uri};
use crate::settings::{ConfigError, MeshSettings};

/// Whom the store believes about XFCC, and whom it lets in.
#[derive(Debug)]
pub struct MeshIdentity {
    /// Peers whose XFCC header is believed (the store's own sidecar).
    pub trusted_peers: Vec<IpNet>,
    /// SPIFFE ids allowed to call the data plane (reloaded when given as a file).
    pub allowed: Allowlist,
}

impl MeshIdentity {
    /// The identity `settings` name, the workloads file read now.
    pub fn open(settings: MeshSettings) -> Result<Self, ConfigError> {
        Ok(MeshIdentity {
            trusted_peers: settings.trusted_peers,
            allowed: Allowlist::open(settings.workloads)?,
        })
    }

    /// The trusted ranges other than one of [`SIDECAR_ADDRESSES`] alone: every address in
    /// them can name any allowlisted workload, so `serve` warns about each at start.
    pub fn trusted_beyond_the_sidecar(&self) -> Vec<IpNet> {
        self.trusted_peers
            .iter()
            .filter(|net| {
                net.prefix_len() != net.max_prefix_len() || !SIDECAR_ADDRESSES.contains(&net.addr())
            })
            .copied()
            .collect()
    }

    /// The allowlisted workload a call from `peer` with the XFCC header lines `xfcc` comes
    /// from; on refusal, why, and the SPIFFE id when one was read (to log, never to label).
    pub fn identify<'a>(
        &self,
        peer: Option<IpAddr>,
        xfcc: &[&'a [u8]],
    ) -> Result<Arc<str>, (Refused, Option<&'a str>)> {
        let trusted = peer.is_some_and(|ip| self.trusted_peers.iter().any(|net| net.contains(&ip)));
        if !trusted {
            return Err((Refused::UntrustedPeer, None));
        }
        let line = match xfcc {
            [] => return Err((Refused::NoIdentity, None)),
            [line] => *line,
            _ => return Err((Refused::Ambiguous, None)),
        };
        let text = std::str::from_utf8(line).map_err(|_| (Refused::Ambiguous, None))?;
        let id = last_element_uri(text).ok_or((Refused::Ambiguous, None))?;
        self.allowed
            .current()
            .iter()
            .find(|allowed| ***allowed == *id)
            .cloned()
            .ok_or((Refused::NotAllowed, Some(id)))
    }

    /// The metrics label of `id`: itself when allowlisted, else [`OTHER_LABEL`].
    pub fn label(&self, id: Option<&str>) -> String {
        let allowed = self.allowed.current();
        id.and_then(|id| allowed.iter().find(|a| ***a == *id))
            .map_or(OTHER_LABEL, |a| a)
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
    const B: &str = "spiffe://cluster.local/ns/shop/sa/cart";

    fn mesh() -> MeshIdentity {
        MeshIdentity {
            trusted_peers: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            allowed: Allowlist::fixed(vec![A.into(), B.into()]),
        }
    }

    fn loopback() -> Option<IpAddr> {
        Some(IpAddr::from([127, 0, 0, 6]))
    }

    #[test]
    fn only_ranges_beyond_the_sidecars_address_are_wider() {
        let trusting = |peers: &[&str]| MeshIdentity {
            trusted_peers: peers.iter().map(|p| p.parse().unwrap()).collect(),
            allowed: Allowlist::fixed(vec![A.into()]),
        };
        assert!(
            trusting(&["127.0.0.6/32", "::6/128"])
                .trusted_beyond_the_sidecar()
                .is_empty()
        );
        let wide = trusting(&["127.0.0.6/32", "127.0.0.0/8", "::1/128", "10.0.0.0/8"]);
        let wider: Vec<String> = wide
            .trusted_beyond_the_sidecar()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(wider, ["127.0.0.0/8", "::1/128", "10.0.0.0/8"]);
    }

    #[test]
    fn only_a_trusted_peer_is_believed_and_only_for_listed_ids() {
        let mesh = mesh();
        let a = format!("URI={A}");
        assert_eq!(
            mesh.identify(loopback(), &[a.as_bytes()]).unwrap(),
            A.into()
        );
        assert_eq!(
            mesh.identify(Some(IpAddr::from([10, 0, 0, 7])), &[a.as_bytes()]),
            Err((Refused::UntrustedPeer, None))
        );
        assert_eq!(
            mesh.identify(None, &[a.as_bytes()]),
            Err((Refused::UntrustedPeer, None))
        );
        assert_eq!(
            mesh.identify(loopback(), &[]),
            Err((Refused::NoIdentity, None))
        );
        assert_eq!(
            mesh.identify(loopback(), &[a.as_bytes(), a.as_bytes()]),
            Err((Refused::Ambiguous, None))
        );
        let stranger = "URI=spiffe://cluster.local/ns/x/sa/y";
        assert_eq!(
            mesh.identify(loopback(), &[stranger.as_bytes()]),
            Err((
                Refused::NotAllowed,
                Some("spiffe://cluster.local/ns/x/sa/y")
            ))
        );
    }

    #[test]
    fn labels_are_the_allowlist_or_other() {
        let mesh = mesh();
        assert_eq!(mesh.label(Some(A)), A);
        assert_eq!(mesh.label(Some("spiffe://elsewhere/x")), OTHER_LABEL);
        assert_eq!(mesh.label(None), OTHER_LABEL);
    }
}
