//! Who calls the data plane, and which records that caller may reach
//! (`docs/configuration.md#caller-identity`).
//!
//! Behind its own sidecar the store learns each caller's mesh identity from the
//! `x-forwarded-client-cert` (XFCC) header that sidecar adds: the `URI=` field of the
//! element the sidecar appended, which is the SPIFFE id of the client certificate it
//! verified. The header is believed only when the store was told to (`--trust-xfcc`) and
//! only from a peer address it trusts to be that sidecar (`--xfcc-trusted-peers`, by default
//! only [`SIDECAR_ADDRESSES`], not the rest of loopback, which a `kubectl port-forward`
//! connects from); from anyone else it is ignored and the call has no identity. The sidecar
//! *appends* (Istio's `APPEND_FORWARD`), so a client can send an XFCC header of its own
//! and only the last element is the sidecar's: that is the only one read.
//!
//! A workload's records live in its own namespace: the scope a call names is folded with
//! the caller's SPIFFE id into the *record scope* (a framed SHA-256, [`record_scope`]) at
//! the API boundary, so the SQL is unchanged and a second workload that names the same
//! scope reaches a different record. A bearer-token caller without a mesh identity keeps
//! the scope as sent, the one namespace token installs have always had.
//!
//! The parsing here is pure; the live mesh identity ([`crate::access::mesh`]) decides with
//! the current allowlist, and the middleware in [`crate::auth`] feeds it the request's
//! header and peer address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use keyflight_protocol::Digest;
pub use keyflight_protocol::scope::record_scope;

/// The metrics label of a caller authenticated by a bearer token alone.
pub const BEARER_LABEL: &str = "bearer";
/// The metrics label of every caller whose identity is not on the allowlist.
pub const OTHER_LABEL: &str = "other";

/// The authenticated caller of a data-plane call, in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An allowlisted workload, named by its SPIFFE id: its records are its own.
    Workload(Arc<str>),
    /// A bearer-token holder without a mesh identity: the shared namespace.
    Bearer,
}

impl Caller {
    /// The record the caller reaches when it names `scope`.
    pub fn record_scope(&self, scope: &Digest) -> Digest {
        match self {
            Caller::Workload(id) => record_scope(id, scope),
            Caller::Bearer => *scope,
        }
    }

    /// The caller's label in metrics and logs: bounded by the allowlist.
    pub fn label(&self) -> &str {
        match self {
            Caller::Workload(id) => id,
            Caller::Bearer => BEARER_LABEL,
        }
    }
}

/// The addresses Istio's inbound sidecar connects to the application from in `REDIRECT`
/// mode (its `InboundPassthroughCluster` binds them), the default `--xfcc-trusted-peers`
/// (`docs/configuration.md#caller-identity`). Any other local process, a port-forward
/// included, connects from `127.0.0.1` or `::1`.
pub const SIDECAR_ADDRESSES: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6)),
    IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
];

/// Why a call has no usable mesh identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The call did not come from a trusted peer, so its XFCC (if any) was ignored.
    UntrustedPeer,
    /// No XFCC header from the trusted peer: the connection to it was not mTLS.
    NoIdentity,
    /// XFCC repeated, malformed, or its last element has no single `URI=`.
    Ambiguous,
    /// A SPIFFE id not on the allowlist.
    NotAllowed,
}

impl Refused {
    /// The metrics label of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::UntrustedPeer => "untrusted_peer",
            Refused::NoIdentity => "no_identity",
            Refused::Ambiguous => "ambiguous_identity",
            Refused::NotAllowed => "not_allowed",
        }
    }

    /// What the caller is told.
    pub fn detail(self) -> &'static str {
        match self {
            Refused::UntrustedPeer => {
                "the lease-store takes callers' mesh identities only through its own sidecar"
            }
            Refused::NoIdentity => "no mesh identity: the call did not arrive over mutual TLS",
            Refused::Ambiguous => {
                "the x-forwarded-client-cert header does not name exactly one identity"
            }
            Refused::NotAllowed => "this workload is not on the lease-store's allowlist",
        }
    }
}

/// The single `URI=` value of the last element of an XFCC header value, unquoted; `None`
/// when the header is malformed or that element has no URI or more than one.
///
/// Elements are separated by `,`, fields by `;`, key and value by `=`; a value may be a
/// double-quoted string in which `,;=` are literal and `\"` is a quote (Envoy's
/// `x-forwarded-client-cert` format).
pub fn last_element_uri(header: &str) -> Option<&str> {
    let element = split_unquoted(header, ',')?.pop()?;
    let mut uri = None;
    for field in split_unquoted(element, ';')? {
        let (key, value) = field.split_once('=')?;
        if key.trim().eq_ignore_ascii_case("uri") {
            if uri.is_some() {
                return None;
            }
            uri = Some(unquote(value.trim())?);
        }
    }
    uri.filter(|uri| !uri.is_empty())
}

/// `text` split at every `separator` outside double quotes; `None` for an unclosed quote.
fn split_unquoted(text: &str, separator: char) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return None;
    }
    parts.push(&text[start..]);
    Some(parts)
}

/// A field value without its quotes. A quoted URI holding an escaped quote is refused: a
/// SPIFFE id cannot contain one.
fn unquote(value: &str) -> Option<&str> {
    match value.strip_prefix('"') {
        None => Some(value),
        Some(rest) => {
            let inner = rest.strip_suffix('"')?;
            (!inner.contains(['"', '\\'])).then_some(inner)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "spiffe://cluster.local/ns/payments/sa/checkout";
    const B: &str = "spiffe://cluster.local/ns/shop/sa/cart";

    #[test]
    fn the_uri_of_the_last_element_is_the_identity() {
        let istio =
            format!("By=spiffe://cluster.local/ns/ks/sa/lease-store;Hash=abc;Subject=\"\";URI={A}");
        assert_eq!(last_element_uri(&istio), Some(A));
        let forged_first = format!("URI={B};By=x,{istio}");
        assert_eq!(last_element_uri(&forged_first), Some(A));
        let quoted = format!("Subject=\"/C=US/CN=a, b;c=d\";URI=\"{A}\"");
        assert_eq!(last_element_uri(&quoted), Some(A));
    }

    #[test]
    fn the_headers_envoy_writes_name_the_client() {
        // Written by Envoy 1.40 (`APPEND_FORWARD`, `set_current_client_cert_details` subject,
        // uri, dns) for a client certificate with one URI SAN: alone, and appended to the
        // client's own forged header (`docs/envoy-facts.md#forwarded-client-certificates`).
        let by = "By=spiffe://cluster.local/ns/keyflight/sa/lease-store;\
                  Hash=51aab55fc378f834b39699eb2947f8e1ce4f99c1addc4721565478983470d737;\
                  Subject=\"CN=cli\";URI=spiffe://cluster.local/ns/payments/sa/checkout";
        assert_eq!(last_element_uri(by), Some(A));
        let appended = format!("URI=spiffe://forged/one;By=x,{by}");
        assert_eq!(last_element_uri(&appended), Some(A));
        // With `set_current_client_cert_details` uri only (no Subject), after two forged
        // header lines, which Envoy joins into one before appending its element.
        let uri_only = "URI=spiffe://forged/one,URI=spiffe://forged/two,\
                        By=spiffe://cluster.local/ns/keyflight/sa/lease-store;\
                        Hash=52eba250900c6447fd39ab4282dbce2783456f42e8ec8cf618fb25815af658aa;\
                        URI=spiffe://cluster.local/ns/payments/sa/checkout";
        assert_eq!(last_element_uri(uri_only), Some(A));
    }

    #[test]
    fn malformed_or_ambiguous_headers_name_no_one() {
        for bad in [
            "",
            "By=x;Hash=y",
            &format!("URI={A};URI={B}"),
            &format!("URI={A},By=x"),
            &format!("Subject=\"unclosed;URI={A}"),
            "URI=",
            &format!("URI=\"{A}\\\"\""),
            "URI",
        ] {
            assert_eq!(last_element_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_bearer_caller_is_labelled_bearer() {
        assert_eq!(Caller::Bearer.label(), BEARER_LABEL);
    }

    #[test]
    fn workloads_reach_different_records_for_one_scope() {
        let scope = Digest::of(b"scope");
        let a = Caller::Workload(A.into()).record_scope(&scope);
        let b = Caller::Workload(B.into()).record_scope(&scope);
        assert_ne!(a, b);
        assert_ne!(a, scope);
        assert_eq!(Caller::Bearer.record_scope(&scope), scope);
        assert_eq!(a, record_scope(A, &scope), "stable");
    }
}
