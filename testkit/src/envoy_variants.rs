//! Other Envoy shapes some scenarios need, as edits of the rendered shipped config.
//!
//! The shipped `envoy/demo.yaml` takes the principal from a header and gives the upstream
//! 30 s. Identity and timeout scenarios need more: `jwt_authn` in front of the filter, a TLS
//! listener that requires client certificates, a route timeout shorter than a slow upstream;
//! the chaos harness (`keyflight-chaos`) adds a request header naming the Envoy. Each [`EnvoyEdit`] rewrites the rendered text at one anchor that must occur exactly once
//! (like [`crate::envoy_config`]), so everything else stays the file users run; the edits are
//! also the how-to for a deployment (envoy/README.md points here).

use std::path::PathBuf;
use std::time::Duration;

use crate::envoy_config::RenderError;
use crate::yaml_lines::{insert_after, insert_at, replace_line};

/// The `payload_in_metadata` name [`EnvoyEdit::JwtAuthn`] uses (the plugin's
/// `jwt_claim.metadata_key`).
pub const JWT_PAYLOAD_METADATA_KEY: &str = "jwt_payload";

/// The catch-all route's timeout line as `envoy/demo.yaml` ships it.
const SHIPPED_ROUTE_TIMEOUT: &str = "timeout: 30s";

/// The catch-all route's match line as `envoy/demo.yaml` ships it.
const CATCH_ALL_MATCH: &str = "- match: { prefix: \"/\" }";

/// The catch-all route's retry conditions as `envoy/demo.yaml` ships them.
pub const SHIPPED_RETRY_ON: &str = "retry_on: connect-failure,refused-stream,reset-before-request";

/// One change to the rendered Envoy config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvoyEdit {
    /// The route's upstream timeout (the demo ships 30 s): past it Envoy answers 504 itself.
    RouteTimeout(Duration),
    /// The route retry policy's `retry_on` (the demo ships only the conditions where the
    /// request never reached the upstream), e.g. a permissive `reset,5xx`.
    RouteRetryOn(String),
    /// The listener treats callers on 127.0.0.1 as internal, as a mesh-internal listener
    /// does: Envoy then honours their `x-envoy-*` request headers (`x-envoy-retry-on`, …)
    /// instead of stripping them.
    TrustLoopbackCallers,
    /// A second `demo_upstream` endpoint on `port`, where nothing listens: requests the
    /// load balancer sends there fail to connect.
    DeadUpstreamEndpoint {
        /// A port nobody listens on.
        port: u16,
    },
    /// `envoy.filters.http.jwt_authn` before the wasm filter: tokens from `issuer` are
    /// verified against the inline JWKS `jwks` and their claims put in dynamic metadata
    /// under [`JWT_PAYLOAD_METADATA_KEY`]. A request without a token passes on, so the
    /// keyflight filter decides about it (401 `principal_required`); a bad token is 401.
    JwtAuthn {
        /// The `iss` tokens must carry.
        issuer: String,
        /// The JWKS JSON (`{"keys": [...]}`).
        jwks: String,
    },
    /// A request header the catch-all route adds to every request it forwards upstream
    /// (replacing a client-sent one), e.g. which proxy forwarded it: the chaos harness tells
    /// its Envoys apart in the upstream's execution log this way.
    AddRequestHeader {
        /// The header name.
        name: String,
        /// Its value.
        value: String,
    },
    /// TLS on the listener, requiring a client certificate signed by `ca`.
    DownstreamMtls {
        /// The server certificate chain (PEM).
        cert: PathBuf,
        /// The server key (PEM).
        key: PathBuf,
        /// The CA that signs client certificates (PEM).
        ca: PathBuf,
    },
    /// The filter's calls to the lease-store over mutual TLS, as a workload's outbound
    /// sidecar makes them: presenting the workload's certificate (its SPIFFE id in the URI
    /// SAN) and accepting only a store certificate signed by `ca` naming `store_id`.
    StoreMtls {
        /// The workload's certificate chain (PEM).
        cert: PathBuf,
        /// The workload's key (PEM).
        key: PathBuf,
        /// The mesh CA (PEM).
        ca: PathBuf,
        /// The SPIFFE id the store's sidecar must present.
        store_id: String,
    },
}

impl EnvoyEdit {
    /// Applies the edit to a rendered config.
    pub fn apply(&self, yaml: &str) -> Result<String, RenderError> {
        match self {
            EnvoyEdit::RouteTimeout(timeout) => replace_line(
                yaml,
                SHIPPED_ROUTE_TIMEOUT,
                &[format!(
                    "timeout: {}.{:03}s",
                    timeout.as_secs(),
                    timeout.subsec_millis()
                )],
            ),
            EnvoyEdit::RouteRetryOn(conditions) => {
                replace_line(yaml, SHIPPED_RETRY_ON, &[format!("retry_on: {conditions}")])
            }
            EnvoyEdit::TrustLoopbackCallers => insert_at(
                yaml,
                "stat_prefix: edge",
                1,
                &[
                    "use_remote_address: true".to_owned(),
                    "internal_address_config:".to_owned(),
                    "  cidr_ranges: [{ address_prefix: 127.0.0.1, prefix_len: 32 }]".to_owned(),
                ],
            ),
            EnvoyEdit::DeadUpstreamEndpoint { port } => insert_at(
                yaml,
                "cluster_name: demo_upstream",
                3,
                &[
                    "      - endpoint:".to_owned(),
                    "          address:".to_owned(),
                    format!(
                        "            socket_address: {{ address: 127.0.0.1, port_value: {port} }}"
                    ),
                ],
            ),
            EnvoyEdit::JwtAuthn { issuer, jwks } => {
                insert_after(yaml, "http_filters:", &jwt_authn_filter(issuer, jwks))
            }
            EnvoyEdit::AddRequestHeader { name, value } => insert_at(
                yaml,
                CATCH_ALL_MATCH,
                1,
                &[
                    "  request_headers_to_add:".to_owned(),
                    format!("    - header: {{ key: {name}, value: {value} }}"),
                    "      append_action: OVERWRITE_IF_EXISTS_OR_ADD".to_owned(),
                ],
            ),
            EnvoyEdit::DownstreamMtls { cert, key, ca } => {
                replace_line(yaml, "- filters:", &mtls_filter_chain(cert, key, ca))
            }
            EnvoyEdit::StoreMtls {
                cert,
                key,
                ca,
                store_id,
            } => insert_at(
                yaml,
                "- name: keyflight_lease_store",
                1,
                &store_mtls_socket(cert, key, ca, store_id),
            ),
        }
    }
}

/// The jwt_authn filter, as list-item lines (indentation relative to the list).
fn jwt_authn_filter(issuer: &str, jwks: &str) -> Vec<String> {
    vec![
        "- name: envoy.filters.http.jwt_authn".to_owned(),
        "  typed_config:".to_owned(),
        "    \"@type\": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication".to_owned(),
        "    providers:".to_owned(),
        "      e2e:".to_owned(),
        format!("        issuer: {issuer}"),
        "        local_jwks:".to_owned(),
        format!("          inline_string: '{jwks}'"),
        format!("        payload_in_metadata: {JWT_PAYLOAD_METADATA_KEY}"),
        "    rules:".to_owned(),
        "      - match: { prefix: \"/\" }".to_owned(),
        "        requires:".to_owned(),
        "          requires_any:".to_owned(),
        "            requirements:".to_owned(),
        "              - provider_name: e2e".to_owned(),
        "              - allow_missing: {}".to_owned(),
    ]
}

/// The filter chain's first lines with a TLS transport socket (replacing `- filters:`).
fn mtls_filter_chain(
    cert: &std::path::Path,
    key: &std::path::Path,
    ca: &std::path::Path,
) -> Vec<String> {
    vec![
        "- transport_socket:".to_owned(),
        "    name: envoy.transport_sockets.tls".to_owned(),
        "    typed_config:".to_owned(),
        "      \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext".to_owned(),
        "      require_client_certificate: true".to_owned(),
        "      common_tls_context:".to_owned(),
        "        tls_certificates:".to_owned(),
        format!("          - certificate_chain: {{ filename: \"{}\" }}", cert.display()),
        format!("            private_key: {{ filename: \"{}\" }}", key.display()),
        "        validation_context:".to_owned(),
        format!("          trusted_ca: {{ filename: \"{}\" }}", ca.display()),
        "  filters:".to_owned(),
    ]
}

/// The lease-store cluster's upstream TLS socket (lines at the cluster's key indentation,
/// relative to its `- name:` line).
fn store_mtls_socket(
    cert: &std::path::Path,
    key: &std::path::Path,
    ca: &std::path::Path,
    store_id: &str,
) -> Vec<String> {
    vec![
        "  transport_socket:".to_owned(),
        "    name: envoy.transport_sockets.tls".to_owned(),
        "    typed_config:".to_owned(),
        "      \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext".to_owned(),
        "      common_tls_context:".to_owned(),
        "        tls_certificates:".to_owned(),
        format!("          - certificate_chain: {{ filename: \"{}\" }}", cert.display()),
        format!("            private_key: {{ filename: \"{}\" }}", key.display()),
        "        validation_context:".to_owned(),
        format!("          trusted_ca: {{ filename: \"{}\" }}", ca.display()),
        "          match_typed_subject_alt_names:".to_owned(),
        format!("            - {{ san_type: URI, matcher: {{ exact: \"{store_id}\" }} }}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_config::{shipped_demo_yaml, shipped_plugin_config};

    fn rendered_demo() -> String {
        let yaml = shipped_demo_yaml();
        let plugin = shipped_plugin_config(&yaml).expect("demo plugin JSON");
        crate::envoy_config::render(
            &yaml,
            &crate::envoy_config::shipped_ports(),
            "/x.wasm",
            &plugin,
        )
        .expect("demo renders")
    }

    #[test]
    fn every_edit_applies_to_the_shipped_demo_config() {
        let demo = rendered_demo();
        let timeout = EnvoyEdit::RouteTimeout(Duration::from_millis(300))
            .apply(&demo)
            .expect("route timeout");
        assert!(timeout.contains("timeout: 0.300s"), "{timeout}");

        let retries = EnvoyEdit::RouteRetryOn("reset,5xx".into())
            .apply(&demo)
            .expect("retry_on");
        assert!(retries.contains("retry_on: reset,5xx\n"), "{retries}");
        assert!(!retries.contains(SHIPPED_RETRY_ON), "{retries}");

        let header = EnvoyEdit::AddRequestHeader {
            name: "x-keyflight-via".into(),
            value: "envoy-1".into(),
        }
        .apply(&demo)
        .expect("request header");
        assert!(
            header.contains(
                "- match: { prefix: \"/\" }\n                          request_headers_to_add:\n                            - header: { key: x-keyflight-via, value: envoy-1 }\n"
            ),
            "the catch-all route adds the header:\n{header}"
        );

        let trusted = EnvoyEdit::TrustLoopbackCallers
            .apply(&demo)
            .expect("internal loopback");
        assert!(trusted.contains("internal_address_config:"), "{trusted}");

        let dead = EnvoyEdit::DeadUpstreamEndpoint { port: 1 }
            .apply(&demo)
            .expect("dead endpoint");
        let cluster = dead
            .split("- name: demo_upstream")
            .nth(1)
            .and_then(|rest| rest.split("- name:").next())
            .expect("the demo_upstream cluster");
        assert_eq!(cluster.matches("- endpoint:").count(), 2, "{cluster}");
        assert!(cluster.contains("port_value: 1 }"), "{cluster}");

        let jwt = EnvoyEdit::JwtAuthn {
            issuer: "https://issuer.test".into(),
            jwks: "{\"keys\":[]}".into(),
        }
        .apply(&demo)
        .expect("jwt_authn");
        let jwt_at = jwt
            .find("envoy.filters.http.jwt_authn")
            .expect("jwt filter");
        let wasm_at = jwt
            .find("name: envoy.filters.http.wasm")
            .expect("wasm filter");
        assert!(jwt_at < wasm_at, "jwt_authn runs before the wasm filter");

        let mtls = EnvoyEdit::DownstreamMtls {
            cert: "/c.pem".into(),
            key: "/k.pem".into(),
            ca: "/ca.pem".into(),
        }
        .apply(&demo)
        .expect("mtls");
        assert!(mtls.contains("require_client_certificate: true"), "{mtls}");
        assert!(mtls.contains("  filters:"), "{mtls}");

        let store_mtls = EnvoyEdit::StoreMtls {
            cert: "/w.pem".into(),
            key: "/w.key".into(),
            ca: "/ca.pem".into(),
            store_id: "spiffe://td/store".into(),
        }
        .apply(&demo)
        .expect("store mtls");
        let cluster = store_mtls
            .find("- name: keyflight_lease_store")
            .expect("store cluster");
        let socket = store_mtls.find("UpstreamTlsContext").expect("upstream TLS");
        assert!(cluster < socket, "the TLS socket is the store cluster's");
        assert!(
            store_mtls.contains("      transport_socket:\n"),
            "at the cluster's key indentation: {store_mtls}"
        );
    }
}
