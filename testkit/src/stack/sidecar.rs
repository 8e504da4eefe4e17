//! The store's inbound sidecar of a [`StackOptions::mesh_identity`] stack: an Envoy in
//! front of the lease-store that terminates the workloads' mutual TLS, requires a client
//! certificate signed by the mesh CA, and forwards to the store from `127.0.0.6` with the
//! caller's SPIFFE id appended to `x-forwarded-client-cert`, as Istio's inbound sidecar
//! does (`docs/configuration.md#caller-identity`,
//! `docs/envoy-facts.md#forwarded-client-certificates`). Each filter
//! Envoy calls the store through it with its own workload certificate
//! ([`crate::envoy_variants::EnvoyEdit::StoreMtls`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::StackOptions;
use crate::pki::{CertFiles, Pki};

/// The SPIFFE id of the lease-store's own certificate (its sidecar's).
pub const STORE_SPIFFE_ID: &str = "spiffe://cluster.local/ns/keyflight/sa/lease-store";

/// The identities of a mesh stack: a CA, the store sidecar's certificate, one workload
/// certificate per filter Envoy, and the store's allowlist.
#[derive(Debug, Clone)]
pub struct Mesh {
    pki: Arc<Pki>,
    workloads: Vec<String>,
    allowed: Vec<String>,
}

impl Mesh {
    /// A fresh CA; Envoy `i` runs as `workloads[i]` (one certificate each, the id as its URI
    /// SAN); the store lets in `allowed`.
    pub fn new(workloads: &[&str], allowed: &[&str]) -> Mesh {
        let pki = Pki::new("keyflight-mesh-ca");
        pki.issue(
            "store-sidecar",
            "lease-store",
            &format!(
                "subjectAltName=URI:{STORE_SPIFFE_ID},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
            ),
        );
        for (index, id) in workloads.iter().enumerate() {
            pki.issue_workload(&format!("workload{index}"), id);
        }
        Mesh {
            pki: Arc::new(pki),
            workloads: workloads.iter().map(|id| (*id).to_owned()).collect(),
            allowed: allowed.iter().map(|id| (*id).to_owned()).collect(),
        }
    }

    /// The mesh CA.
    pub fn ca(&self) -> PathBuf {
        self.pki.ca()
    }

    /// How many workloads (filter Envoys) run.
    pub fn workloads(&self) -> usize {
        self.workloads.len()
    }

    /// The certificate of workload `index` (Envoy `index`'s).
    pub fn workload_cert(&self, index: usize) -> CertFiles {
        assert!(index < self.workloads.len(), "there is no workload {index}");
        CertFiles {
            cert: self.pki.file(&format!("workload{index}.pem")),
            key: self.pki.file(&format!("workload{index}.key")),
        }
    }

    /// The store's allowlist, as `KEYFLIGHT_WORKLOADS` takes it.
    pub(super) fn allowlist(&self) -> String {
        self.allowed.join(",")
    }

    fn sidecar_cert(&self) -> CertFiles {
        CertFiles {
            cert: self.pki.file("store-sidecar.pem"),
            key: self.pki.file("store-sidecar.key"),
        }
    }
}

impl StackOptions {
    /// Runs the lease-store behind its own inbound sidecar, authenticating the filters by
    /// their mesh identity (`--trust-xfcc`, no bearer token): one filter Envoy per workload
    /// of `mesh`, each calling the store over mutual TLS with its workload certificate.
    /// One lease-store, free ports, the host's network.
    pub fn mesh_identity(mut self, mesh: Mesh) -> Self {
        self.mesh = Some(mesh);
        self
    }

    /// How many Envoys the stack runs: one per workload of a mesh identity stack, else one
    /// per replica.
    pub(super) fn envoy_count(&self) -> usize {
        self.mesh.as_ref().map_or(self.replicas, Mesh::workloads)
    }

    /// The mesh identity set-up, if the stack runs one.
    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref()
    }
}

/// The sidecar's Envoy config: mTLS on `listen` (client certificate required), the store at
/// `store` on loopback, reached from `127.0.0.6`, its admin interface on `admin`.
pub(super) fn sidecar_config(
    mesh: &Mesh,
    listen: SocketAddr,
    admin: u16,
    store: SocketAddr,
) -> String {
    let cert = mesh.sidecar_cert();
    format!(
        r#"admin:
  address:
    socket_address: {{ address: 127.0.0.1, port_value: {admin} }}
static_resources:
  listeners:
    - name: inbound
      address:
        socket_address: {{ address: {listen_ip}, port_value: {listen_port} }}
      filter_chains:
        - transport_socket:
            name: envoy.transport_sockets.tls
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
              require_client_certificate: true
              common_tls_context:
                tls_certificates:
                  - certificate_chain: {{ filename: "{cert}" }}
                    private_key: {{ filename: "{key}" }}
                validation_context:
                  trusted_ca: {{ filename: "{ca}" }}
          filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: inbound
                forward_client_cert_details: APPEND_FORWARD
                set_current_client_cert_details: {{ uri: true }}
                route_config:
                  virtual_hosts:
                    - name: lease_store
                      domains: ["*"]
                      routes:
                        - match: {{ prefix: "/" }}
                          route: {{ cluster: lease_store, timeout: 0s }}
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: lease_store
      type: STATIC
      connect_timeout: 1s
      # From Istio's inbound address, the only one the store believes XFCC from by default.
      upstream_bind_config:
        source_address: {{ address: 127.0.0.6, port_value: 0 }}
      # Closes idle connections before the store does (docs/configuration.md#limits).
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          common_http_protocol_options: {{ idle_timeout: 5s }}
          explicit_http_config: {{ http_protocol_options: {{}} }}
      load_assignment:
        cluster_name: lease_store
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {{ address: {store_ip}, port_value: {store_port} }}
"#,
        listen_ip = listen.ip(),
        listen_port = listen.port(),
        cert = cert.cert.display(),
        key = cert.key.display(),
        ca = mesh.ca().display(),
        store_ip = store.ip(),
        store_port = store.port(),
    )
}
