//! The rustls client configuration for one database URL's [`TlsParams`]: which server
//! certificates to accept (`sslmode`, `sslrootcert`) and which certificate to present
//! (`sslcert`, `sslkey`). Reads the PEM files; `docs/configuration.md#tls-to-postgres`
//! says what each mode checks.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::url::{SslMode, TlsParams};

/// Why the TLS files of a database URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file cannot be read or holds no usable PEM object.
    #[error("{param}={}: {reason}", path.display())]
    File {
        /// The URL parameter that names the file.
        param: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration (a client key that does not match its certificate).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Builds the client configuration `params` ask for.
pub fn client_config(params: &TlsParams) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match (&params.root_cert, params.checks_chain()) {
        (Some(path), true) if params.mode == SslMode::VerifyFull => {
            Check::ChainAndName(root_store(path)?)
        }
        (Some(path), true) => Check::Chain(root_store(path)?),
        _ => Check::Nothing,
    };
    let verifier = ServerCheck {
        check,
        algorithms: provider.signature_verification_algorithms,
    };
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    Ok(match &params.client {
        Some((cert, key)) => {
            builder.with_client_auth_cert(certificates(cert)?, private_key(key)?)?
        }
        None => builder.with_no_client_auth(),
    })
}

/// The CA certificates of `sslrootcert`.
fn root_store(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certificates_of(path, "sslrootcert")?);
    if added == 0 {
        return Err(file_error("sslrootcert", path, "no usable CA certificate"));
    }
    Ok(store)
}

/// The client certificate chain of `sslcert`.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    certificates_of(path, "sslcert")
}

fn certificates_of(
    path: &Path,
    param: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| file_error(param, path, &e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(param, path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The client's private key of `sslkey` (PKCS#8, PKCS#1 or SEC1 PEM).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error("sslkey", path, &e.to_string()))
}

fn file_error(param: &'static str, path: &Path, reason: &str) -> TlsError {
    TlsError::File {
        param,
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// What libpq's `sslmode` checks of the server's certificate: nothing (`prefer`, `require`
/// without roots: encryption against passive listeners only), the chain to `roots`
/// (`verify-ca`, and `prefer`/`require` with roots), or the chain and the host name
/// (`verify-full`). The handshake's signature is always checked against the certificate's key.
#[derive(Debug)]
struct ServerCheck {
    check: Check,
    algorithms: WebPkiSupportedAlgorithms,
}

/// How much of the server's certificate is checked.
#[derive(Debug)]
enum Check {
    Nothing,
    Chain(RootCertStore),
    ChainAndName(RootCertStore),
}

impl ServerCertVerifier for ServerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let (roots, name_too) = match &self.check {
            Check::Nothing => return Ok(ServerCertVerified::assertion()),
            Check::Chain(roots) => (roots, false),
            Check::ChainAndName(roots) => (roots, true),
        };
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if name_too {
            verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
