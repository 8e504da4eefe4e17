//! Certificates and a client for the mTLS principal scenario.
//!
//! [`Pki::generate`] makes a throwaway CA, a server certificate for `127.0.0.1` and client
//! certificates whose URI SAN is a SPIFFE id (what Istio puts there), with the `openssl`
//! CLI. [`send`] posts through Envoy's TLS listener with `curl`, presenting one client
//! certificate or none. Both are tools every CI machine of this project has; pulling a TLS
//! stack and a certificate builder into the test crate would cost more build time than the
//! scenario takes to run.

use std::path::{Path, PathBuf};

use crate::reply::Reply;

/// A CA, a server certificate and named client certificates (`keyflight_testkit::pki`).
#[derive(Debug)]
pub struct Pki {
    pki: keyflight_testkit::pki::Pki,
}

/// A client certificate and its key.
pub use keyflight_testkit::pki::CertFiles as ClientCert;

impl Pki {
    /// Generates the CA, the server certificate (SAN `IP:127.0.0.1`) and one client
    /// certificate per SPIFFE id in `clients` (its URI SAN).
    pub fn generate(clients: &[&str]) -> Pki {
        let pki = keyflight_testkit::pki::Pki::new("keyflight-e2e-ca");
        pki.issue(
            "server",
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        for (index, spiffe_id) in clients.iter().enumerate() {
            let name = format!("client{index}");
            pki.issue(
                &name,
                &name,
                &format!("subjectAltName=URI:{spiffe_id}\nextendedKeyUsage=clientAuth\n"),
            );
        }
        Pki { pki }
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.pki.ca()
    }

    /// The server certificate.
    pub fn server_cert(&self) -> PathBuf {
        self.pki.file("server.pem")
    }

    /// The server key.
    pub fn server_key(&self) -> PathBuf {
        self.pki.file("server.key")
    }

    /// The client certificate for the `index`th SPIFFE id given to [`Pki::generate`].
    pub fn client(&self, index: usize) -> ClientCert {
        ClientCert {
            cert: self.pki.file(&format!("client{index}.pem")),
            key: self.pki.file(&format!("client{index}.key")),
        }
    }
}

/// A request to send over TLS.
#[derive(Debug, Clone)]
pub struct TlsPost<'a> {
    /// `https://127.0.0.1:PORT/path`.
    pub url: String,
    /// The CA that signed the server certificate.
    pub ca: &'a Path,
    /// The client certificate to present, if any.
    pub client: Option<&'a ClientCert>,
    /// Extra headers.
    pub headers: Vec<(&'a str, &'a str)>,
    /// The body.
    pub body: String,
}

/// Sends the request with `curl`; `None` when no HTTP answer came back (e.g. the TLS
/// handshake was refused).
pub async fn send(post: &TlsPost<'_>) -> Option<Reply> {
    let mut command = tokio::process::Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "20", "--include"])
        .arg("--cacert")
        .arg(post.ca)
        .args(["-X", "POST", "--data-binary", &post.body]);
    if let Some(client) = post.client {
        command
            .arg("--cert")
            .arg(&client.cert)
            .arg("--key")
            .arg(&client.key);
    }
    for (name, value) in &post.headers {
        command.args(["-H", &format!("{name}: {value}")]);
    }
    command.arg(&post.url);
    let output = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("run curl (apt-get install curl): {e}"));
    output
        .status
        .success()
        .then(|| parse_included(&output.stdout))
}

/// Parses `curl --include` output: status line, headers, blank line, body.
fn parse_included(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("curl output has no header end: {raw:?}"));
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("curl output has no status line: {head}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}
